import { type Document, isPair, isScalar, type LineCounter, visit, type YAMLError } from 'yaml';
import { ConfigError } from '../errors';

// The YAML parser's errors as config errors: the line and column where the problem starts (not
// where the parser noticed it), and the offending key named.

interface Where {
  offset: number;
  // Gets the column: "YAML syntax error at column 3" or "duplicate key 'unit' at column 7".
  detail: (column: number) => string;
}

type Node = { range?: [number, number, number] | null };

function rangeOf(node: unknown): [number, number, number] | undefined {
  return (node as Node | null)?.range ?? undefined;
}

function keyText(key: unknown): string {
  if (isScalar(key)) return String(key.source ?? key.value);
  return JSON.stringify((key as { toJSON?: () => unknown })?.toJSON?.() ?? key);
}

// An unterminated quoted string runs to the end of the file, where the parser reports it; the
// string starts at the quote that was never closed.
function unclosedQuote(doc: Document, e: YAMLError): Where | undefined {
  let start: number | undefined;
  visit(doc, {
    Scalar(_k, node) {
      const r = rangeOf(node);
      if ((node.type === 'QUOTE_SINGLE' || node.type === 'QUOTE_DOUBLE') && r !== undefined && r[0] < e.pos[0] && r[1] >= e.pos[0]) {
        if (start === undefined || r[0] > start) start = r[0];
      }
    },
  });
  if (start === undefined) return undefined;
  const quote = e.message.includes('"') ? '"' : "'";
  const detail = `the string opened here with ${quote} is never closed (no matching ${quote} before the end of the file)`;
  return { offset: start, detail: (col) => `YAML syntax error at column ${col}: ${detail}` };
}

function duplicateKey(doc: Document, e: YAMLError, lc: LineCounter): Where | undefined {
  let found: Where | undefined;
  visit(doc, {
    Map(_k, map) {
      const items = map.items.filter(isPair);
      const i = items.findIndex((p) => rangeOf(p.key)?.[0] === e.pos[0]);
      if (i < 0) return undefined;
      const name = keyText(items[i].key);
      const first = items.slice(0, i).find((p) => keyText(p.key) === name);
      const firstOffset = rangeOf(first?.key)?.[0];
      const at = firstOffset === undefined ? '' : ` (first given at line ${lc.linePos(firstOffset).line})`;
      found = { offset: e.pos[0], detail: (col) => `duplicate key '${name}' at column ${col}${at}: a map may have each key once; remove or merge one of them` };
      return visit.BREAK;
    },
  });
  return found;
}

const INDENT = 'check the indentation of this line against the lines above';
const HINTS: [RegExp, string][] = [
  [/^Tabs are not allowed/, 'YAML indents with spaces only: replace the tab'],
  [/indent/i, INDENT],
  [/^Sequence item without - indicator/, `${INDENT}: a list item starts with '- '`],
  [/^Nested mappings are not allowed in compact mappings/, "a value containing ': ' must be quoted"],
];

function describe(doc: Document, e: YAMLError, lc: LineCounter): Where {
  if (e.code === 'DUPLICATE_KEY') {
    const dup = duplicateKey(doc, e, lc);
    if (dup !== undefined) return dup;
  }
  if (e.code === 'MISSING_CHAR' && /closing .?quote/i.test(e.message)) {
    const quote = unclosedQuote(doc, e);
    if (quote !== undefined) return quote;
  }
  const hint = HINTS.find(([re]) => re.test(e.message))?.[1];
  const detail = hint === undefined ? e.message : `${e.message} (${hint})`;
  return { offset: e.pos[0], detail: (col) => `YAML syntax error at column ${col}: ${detail}` };
}

export function yamlSyntaxErrors(file: string, doc: Document, lc: LineCounter): ConfigError[] {
  const seen = new Set<string>();
  const out: ConfigError[] = [];
  for (const e of doc.errors) {
    const { offset, detail } = describe(doc, e, lc);
    const { line, col } = lc.linePos(offset);
    const text = detail(col);
    // One unclosed quote can be reported more than once; say it once.
    if (seen.has(`${line}:${text}`)) continue;
    seen.add(`${line}:${text}`);
    out.push(new ConfigError(file, text, line));
  }
  return out;
}
