/**
 * clmagic's JupyterLab extension: `%%clkernel` cells highlighted as OpenCL C.
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import {
  EditorExtensionRegistry,
  IEditorExtensionRegistry,
  IEditorLanguageRegistry
} from '@jupyterlab/codemirror';

import { clkernelHighlighting, clkernelLanguage } from './clkernel';

/** The MIME types of (I)Python code cells, where `%%clkernel` is a cell magic. */
const PYTHON = new Set(['text/x-ipython', 'text/x-python']);

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'clmagic:clkernel-highlighting',
  description: 'Highlights the body of %%clkernel cells as OpenCL C.',
  autoStart: true,
  requires: [IEditorExtensionRegistry, IEditorLanguageRegistry],
  activate: async (
    _app: JupyterFrontEnd,
    extensions: IEditorExtensionRegistry,
    languages: IEditorLanguageRegistry
  ): Promise<void> => {
    const [python, c] = await Promise.all([
      languages.getLanguage('text/x-ipython'),
      languages.getLanguage('text/x-csrc')
    ]);
    if (!python?.support || !c?.support) {
      console.warn('clmagic: no IPython or C language in this JupyterLab; %%clkernel stays plain');
      return;
    }
    const clkernel = clkernelLanguage(python.support.language.parser, c.support.language);
    extensions.addExtension({
      name: 'clmagic:clkernel',
      factory: ({ model }) =>
        EditorExtensionRegistry.createImmutableExtension(
          clkernelHighlighting(
            () => PYTHON.has(model.mimeType),
            model.sharedModel.getSource(),
            clkernel,
            c.support!.language
          )
        )
    });
  }
};

export default plugin;
