"""A kernel launch checked under Oclgrind (``%clcheck``, :func:`clmagic.check_kernel`): the
launch's arguments copied (:mod:`.launch_args`), one launch in a child process with Oclgrind's
checks on (:mod:`.child`), its log read (:mod:`.oclgrind_log`) into distinct findings
(:mod:`.findings`); :mod:`.run` puts them together. The renderings are
:mod:`clmagic.show.check`'s."""
