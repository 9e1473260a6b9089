/**
 * A CodeMirror 6 language for `%%clkernel` cells: the magic line parsed by the notebook's
 * (I)Python parser, the body by the C parser with OpenCL C's additions, and an editor extension
 * that puts it in force while the cell starts with `%%clkernel`.
 */
import {
  defineLanguageFacet,
  HighlightStyle,
  Language,
  languageDataProp,
  syntaxHighlighting,
  syntaxTree
} from '@codemirror/language';
import {
  Compartment,
  EditorState,
  Extension,
  Prec,
  RangeSetBuilder,
  Text
} from '@codemirror/state';
import { Decoration, DecorationSet, EditorView, ViewPlugin, ViewUpdate } from '@codemirror/view';
import {
  Input,
  NodeType,
  parseMixed,
  ParseWrapper,
  Parser,
  PartialParse,
  SyntaxNode,
  Tree,
  TreeFragment
} from '@lezer/common';
import { tags as t } from '@lezer/highlight';

import { openclWord, QualifiersAsBlanks, WORD, WordKind } from './opencl';

/** The first line that is not blank starts with this (IPython strips blank lines and indent). */
const MAGIC = /^\s*%%clkernel(?:\s|$)/;

/** Does this cell run through `%%clkernel`? */
export function startsWithClkernel(doc: Text): boolean {
  for (let i = 1; i <= doc.lines; i++) {
    const text = doc.line(i).text;
    if (text.trim()) {
      return MAGIC.test(text);
    }
  }
  return false;
}

const cellData = defineLanguageFacet({});
const Cell = NodeType.define({
  id: 0,
  name: 'ClkernelCell',
  top: true,
  props: [[languageDataProp, cellData]]
});
const MagicLine = NodeType.define({ id: 1, name: 'MagicLine' });
const Body = NodeType.define({ id: 2, name: 'OpenCLBody' });

type Ranges = readonly { from: number; to: number }[];

/** The end of the first line that is not blank (the magic line), or `to`. */
function magicLineEnd(input: Input, from: number, to: number): number {
  let seenText = false;
  for (let pos = from; pos < to; ) {
    const chunk = input.chunk(pos);
    if (!chunk.length) {
      break;
    }
    for (let i = 0; i < chunk.length && pos + i < to; i++) {
      const code = chunk.charCodeAt(i);
      if (code === 10) {
        if (seenText) {
          return pos + i;
        }
      } else if (code !== 32 && code !== 9 && code !== 13) {
        seenText = true;
      }
    }
    pos += chunk.length;
  }
  return to;
}

/** Splits the cell into the magic line and the body, in one step. */
class CellParse implements PartialParse {
  parsedPos: number;
  stoppedAt: number | null = null;

  constructor(
    private readonly input: Input,
    private readonly ranges: Ranges
  ) {
    this.parsedPos = ranges[0].from;
  }

  advance(): Tree {
    const from = this.ranges[0].from;
    const to = this.ranges[this.ranges.length - 1].to;
    const eol = magicLineEnd(this.input, from, to);
    const children = [new Tree(MagicLine, [], [], eol - from)];
    const positions = [0];
    if (eol < to) {
      children.push(new Tree(Body, [], [], to - eol - 1));
      positions.push(eol + 1 - from);
    }
    this.parsedPos = to;
    return new Tree(Cell, children, positions, to - from);
  }

  stopAt(pos: number): void {
    this.stoppedAt = pos;
  }
}

class CellParser extends Parser {
  constructor(private readonly wrap: ParseWrapper) {
    super();
  }

  createParse(input: Input, fragments: readonly TreeFragment[], ranges: Ranges): PartialParse {
    return this.wrap(new CellParse(input, ranges), input, fragments, ranges);
  }
}

/** The C parser reading OpenCL C: qualifiers read as blanks (see QualifiersAsBlanks). */
class OpenCLParser extends Parser {
  constructor(private readonly c: Parser) {
    super();
  }

  createParse(input: Input, fragments: readonly TreeFragment[], ranges: Ranges): PartialParse {
    return this.c.createParse(new QualifiersAsBlanks(input), fragments, ranges);
  }
}

const MARKS: Record<WordKind, Decoration> = {
  qualifier: Decoration.mark({ class: 'cm-clmagic-qualifier' }),
  type: Decoration.mark({ class: 'cm-clmagic-type' }),
  builtin: Decoration.mark({ class: 'cm-builtin' }), // JupyterLab's class for Python built-ins
  constant: Decoration.mark({ class: 'cm-clmagic-constant' })
};

/** The innermost node of `node` that covers the character at `pos`. */
function innermost(node: SyntaxNode, pos: number): SyntaxNode {
  for (let inner = node.enter(pos, 1); inner; inner = node.enter(pos, 1)) {
    node = inner;
  }
  return node;
}

/** Syntax nodes whose words are text, not code. */
const TEXT_NODES = /Comment|String|CharLiteral/;

/** Marks OpenCL C's own words (qualifiers, types, built-ins) in the body of a clkernel cell. */
function openclWords(): Extension {
  const build = (view: EditorView): DecorationSet => {
    const builder = new RangeSetBuilder<Decoration>();
    const tree = syntaxTree(view.state);
    // the body is the cell's second child (the first is the magic line), each a mounted tree
    const body = tree.type === Cell ? tree.topNode.firstChild?.nextSibling : null;
    if (!body) {
      return Decoration.none;
    }
    for (const visible of view.visibleRanges) {
      const from = Math.max(visible.from, body.from);
      const to = Math.min(visible.to, body.to);
      if (from >= to) {
        continue;
      }
      const text = view.state.doc.sliceString(from, to);
      const word = new RegExp(WORD.source, 'g');
      for (let m = word.exec(text); m; m = word.exec(text)) {
        const kind = openclWord(m[0]);
        const start = from + m.index;
        if (kind && !TEXT_NODES.test(innermost(body, start).name)) {
          builder.add(start, start + m[0].length, MARKS[kind]);
        }
      }
    }
    return builder.finish();
  };
  return ViewPlugin.define(
    view => ({
      decorations: build(view),
      update(update: ViewUpdate) {
        if (
          update.docChanged ||
          update.viewportChanged ||
          syntaxTree(update.startState) !== syntaxTree(update.state)
        ) {
          this.decorations = build(update.view);
        }
      }
    }),
    { decorations: plugin => plugin.decorations }
  );
}

/** What JupyterLab's highlight style leaves plain in C and OpenCL C gets colours for. */
function bodyStyle(c: Language): Extension {
  return [
    syntaxHighlighting(
      HighlightStyle.define(
        [
          {
            tag: [t.typeName, t.standard(t.typeName)],
            color: 'var(--jp-mirror-editor-variable-3-color)'
          },
          {
            tag: t.modifier,
            color: 'var(--jp-mirror-editor-keyword-color)',
            fontWeight: 'bold'
          },
          { tag: t.processingInstruction, color: 'var(--jp-mirror-editor-meta-color)' }
        ],
        { scope: c }
      )
    ),
    EditorView.baseTheme({
      '.cm-clmagic-qualifier': {
        color: 'var(--jp-mirror-editor-keyword-color)',
        fontWeight: 'bold'
      },
      '.cm-clmagic-type': { color: 'var(--jp-mirror-editor-variable-3-color)' },
      '.cm-clmagic-constant': { color: 'var(--jp-mirror-editor-atom-color)' }
    })
  ];
}

/**
 * The `%%clkernel` cell language: the magic line is parsed by `python` (the notebook's own
 * parser, so it looks as in any other cell), the rest by `c` reading OpenCL C.
 */
export function clkernelLanguage(python: Parser, c: Language): Language {
  const opencl = new OpenCLParser(c.parser);
  const nest = parseMixed(node => {
    if (node.from === node.to) {
      return null;
    }
    if (node.type === MagicLine) {
      return { parser: python };
    }
    return node.type === Body ? { parser: opencl } : null;
  });
  return new Language(cellData, new CellParser(nest), [], 'clkernel');
}

/**
 * The editor extension: while `applies()` (a Python cell) and the cell starts with `%%clkernel`,
 * `clkernel` is the editor's language, ahead of the one JupyterLab configured; typing or
 * deleting the magic switches it on or off.  `source` is the cell's text at creation.
 */
export function clkernelHighlighting(
  applies: () => boolean,
  source: string,
  clkernel: Language,
  c: Language
): Extension {
  const slot = new Compartment();
  const on = Prec.highest(clkernel.extension);
  const wanted = (doc: Text) => applies() && startsWithClkernel(doc);
  return [
    slot.of(wanted(Text.of(source.split('\n'))) ? on : []),
    // Checked on every transaction: a Set lookup and the first lines that are not blank, so
    // the MIME type changing (another kernel) is seen as well as edits.
    EditorState.transactionExtender.of(tr => {
      const want = wanted(tr.newDoc);
      return want === (slot.get(tr.startState) === on)
        ? null
        : { effects: slot.reconfigure(want ? on : []) };
    }),
    openclWords(),
    bodyStyle(c)
  ];
}
