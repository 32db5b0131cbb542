import { type Document, type LineCounter, isAlias, isMap, isPair, isSeq } from 'yaml';

// Bounds on what one config load may cost. A config file is trusted to say what the limits are,
// not to take the process down: without these, a 700-byte alias bomb expands to millions of nodes,
// deep nesting overflows the stack, and a 50 MB file stalls a reload for seconds.

export interface ConfigLimits {
  // Largest config file read, in bytes (CONFIG_MAX_FILE_BYTES).
  maxFileBytes: number;
  // Most descriptors in the whole config, counted after aliases are expanded: an alias to a list
  // of descriptors counts the list again each time it is used (CONFIG_MAX_DESCRIPTORS).
  maxDescriptors: number;
}

// Real configs are a few KB; large multi-tenant ones a few hundred KB. 2 MiB is ~23,000
// descriptors in the densest form and still parses in about 1.5 s (the YAML parser costs ~60 µs
// per descriptor); 100,000 descriptors compile in a few seconds and a few hundred MB.
export const DEFAULT_CONFIG_LIMITS: ConfigLimits = { maxFileBytes: 2 * 1024 * 1024, maxDescriptors: 100_000 };

// Descriptors nested deeper than this are refused (Envoy descriptors have a handful of entries;
// compile and /rlconfig walk the tree recursively, so the depth must stay small).
export const MAX_DESCRIPTOR_DEPTH = 32;
// YAML collections nested deeper than this (maps and lists, e.g. in `metadata`) are refused.
export const MAX_YAML_DEPTH = 64;
// Nodes reached through aliases, in one load. Each use of an alias counts every node under its
// anchor: `rate_limit: *std` on 20,000 descriptors is ~100,000.
export const MAX_ALIAS_NODES = 1_000_000;

// A cap was hit while reading a file; parse turns it into one ConfigError at `line`.
export class LimitError extends Error {
  constructor(
    message: string,
    readonly line?: number,
  ) {
    super(message);
    this.name = 'LimitError';
  }
}

// Counters shared by every file of one load.
export class LoadBudget {
  descriptors = 0;
  aliasNodes = 0;

  constructor(readonly limits: ConfigLimits = DEFAULT_CONFIG_LIMITS) {}

  descriptor(line: number | undefined): void {
    if (++this.descriptors > this.limits.maxDescriptors) {
      const max = this.limits.maxDescriptors;
      throw new LimitError(`config limit: more than ${max} descriptors (CONFIG_MAX_DESCRIPTORS; an alias counts each time it is used)`, line);
    }
  }

  alias(nodes: number, line: number | undefined): void {
    this.aliasNodes += nodes;
    if (this.aliasNodes > MAX_ALIAS_NODES) {
      throw new LimitError(`config limit: aliases expand to more than ${MAX_ALIAS_NODES} YAML nodes (an alias bomb?)`, line);
    }
  }
}

export interface DocumentIndex {
  // Each alias's anchored node (the last one with that name before the alias, as YAML says).
  targets: Map<unknown, unknown>;
  // Node count under each collection, aliases counted as one.
  sizes: Map<unknown, number>;
}

function children(node: unknown): unknown[] {
  if (isSeq(node)) return node.items;
  if (isMap(node)) return node.items.flatMap((p) => (isPair(p) ? [p.key, p.value] : []));
  return [];
}

// One iterative pass over the literal document: resolves every alias once (the yaml package's own
// resolve walks the whole document per call), refuses unknown and self-containing aliases and
// nesting deeper than MAX_YAML_DEPTH, and sizes every collection so that expanding an alias can be
// charged to the budget before it is walked.
export function indexDocument(doc: Document, lc: LineCounter): DocumentIndex {
  const lineOf = (n: unknown) => {
    const range = (n as { range?: [number, number, number] | null } | null)?.range;
    return range ? lc.linePos(range[0]).line : undefined;
  };
  const targets = new Map<unknown, unknown>();
  const sizes = new Map<unknown, number>();
  const anchors = new Map<string, unknown>();
  // path[d] is the collection being walked at depth d: the ancestors of a node at depth k are path[0..k-1].
  const path: unknown[] = [];
  const stack: { node: unknown; depth: number; exit: boolean }[] = [{ node: doc.contents, depth: 0, exit: false }];
  while (stack.length > 0) {
    const { node, depth, exit } = stack.pop()!;
    if (exit) {
      let size = 1;
      for (const c of children(node)) size += sizes.get(c) ?? (c == null ? 0 : 1);
      sizes.set(node, size);
      continue;
    }
    if (node == null) continue;
    if (isAlias(node)) {
      const target = anchors.get(node.source);
      if (target === undefined) throw new LimitError(`error loading config file: unknown anchor '${node.source}' referenced`, lineOf(node));
      for (let i = 0; i < depth; i++) {
        if (path[i] === target) throw new LimitError(`error loading config file: alias *${node.source} refers to a node that contains it`, lineOf(node));
      }
      targets.set(node, target);
      continue;
    }
    const anchor = (node as { anchor?: string }).anchor;
    if (anchor) anchors.set(anchor, node);
    if (!isMap(node) && !isSeq(node)) continue;
    if (depth >= MAX_YAML_DEPTH) throw new LimitError(`config limit: YAML nested deeper than ${MAX_YAML_DEPTH} levels`, lineOf(node));
    path[depth] = node;
    stack.push({ node, depth, exit: true });
    const kids = children(node);
    for (let i = kids.length - 1; i >= 0; i--) stack.push({ node: kids[i], depth: depth + 1, exit: false });
  }
  return { targets, sizes };
}
