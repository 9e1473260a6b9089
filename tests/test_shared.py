"""Stores several people write (issue 11, part B): clearing the team's layer must be asked for;
entries carry what they were built for, sealed, and with a team secret signed; binaries from
elsewhere are proven loadable in a child before the user's process loads them."""

from __future__ import annotations

import pytest
from stores import FP, FP2, synthetic

from clmagic import ClmagicError, Compiler
from clmagic.config import Settings
from clmagic.manage import clear_cache
from clmagic.store import LayeredStore, open_store


def _layered(tmp_path, redis_server) -> Compiler:
    redis_server.client.flushall()
    store = LayeredStore(open_store(str(tmp_path / "local")), open_store(redis_server.url))
    return Compiler(Settings.from_env({"CLMAGIC_CACHE_DIR": "0"}), store=store)


@pytest.mark.parametrize("how", ["all", "device", "older-than", "keys"])
def test_clearing_a_layered_cache_leaves_the_teams_layer_unless_asked(tmp_path, redis_server,
                                                                      how):
    c = _layered(tmp_path, redis_server)
    entries = [synthetic(1), synthetic(2), synthetic(3, fingerprint=FP2)]
    c.store.put_many(entries)
    args = {"all": {}, "device": {"device": FP}, "older-than": {"older_than": 0.0},
            "keys": {"keys": [entries[0].key[:8], entries[1].key[:8]]}}[how]
    removed = clear_cache(compiler=c, **args)
    assert removed.entries >= 2 and "directory" in removed.location
    assert len(list(c.store.remote.entries())) == 3  # the team's entries are all there
    assert len(list(c.store.local.entries())) == (0 if how in ("all", "older-than") else 1)
    clear_cache(compiler=c, remote=True, **args)
    assert len(list(c.store.remote.entries())) == (0 if how in ("all", "older-than") else 1)


def test_a_shared_store_alone_is_cleared_only_when_asked(tmp_path, redis_server):
    redis_server.client.flushall()
    c = Compiler(Settings.from_env({"CLMAGIC_CACHE_DIR": "0"}),
                 store=open_store(redis_server.url))
    c.store.put(synthetic(1))
    with pytest.raises(ClmagicError, match="shared with others.*remote=True"):
        clear_cache(compiler=c)
    assert len(list(c.store.entries())) == 1
    assert clear_cache(compiler=c, remote=True).entries == 1


def test_clcache_clear_remote_is_the_way_to_ask(tmp_path, redis_server, ipshell):
    from clmagic.magics import CLMagics

    c = _layered(tmp_path, redis_server)
    c.store.put_many([synthetic(1), synthetic(2)])
    ipshell.register_magics(CLMagics(shell=ipshell, compiler=c))
    try:
        ipshell.run_line_magic("clcache", "clear")
        assert len(list(c.store.remote.entries())) == 2
        assert list(c.store.local.entries()) == []
        ipshell.run_line_magic("clcache", "clear --remote")
        assert list(c.store.remote.entries()) == []
    finally:
        ipshell.reset(new_session=False)
