// Go regular expressions (RE2 syntax, as statsd_exporter's `match_type: regex` compiles them) run
// as JavaScript ones. The two agree on the common syntax: literals, '.', classes, \d \w \s \b and
// their negations, groups, alternation, greedy and lazy repetition, ^ and $ (without flags: the
// whole text), and both pick the leftmost-first match. What they read differently or only one of
// them has is refused, never guessed: inline flags such as (?i), \A \z \Q..\E \C, \p{..}, octal and
// \x{..} escapes, \a, POSIX classes [[:alpha:]], an empty-looking class []..] or [^]..], and the
// lookarounds and back-references Go does not have.

const PASS_ESCAPES = new Set(['f', 't', 'n', 'r', 'v', 'b', 'B', 'd', 'D', 's', 'S', 'w', 'W']);

export function goRegex(source: string): RegExp {
  let out = '';
  let inClass = false;
  for (let i = 0; i < source.length; i++) {
    const c = source[i];
    if (c === '\\') {
      const next = source[i + 1];
      if (next === undefined) throw new Error('ends with a lone backslash');
      if (/[A-Za-z0-9]/.test(next) && !PASS_ESCAPES.has(next) && !(next === 'x' && /^[0-9A-Fa-f]{2}$/.test(source.slice(i + 2, i + 4)))) {
        throw new Error(`escape \\${next} is not taken (its meaning differs between Go and JavaScript, or Go has none)`);
      }
      out += c + next;
      i++;
    } else if (inClass) {
      if (c === '[' && source[i + 1] === ':') throw new Error('POSIX classes such as [[:alpha:]] are not taken');
      if (c === ']') inClass = false;
      out += c;
    } else if (c === '[') {
      const rest = source.slice(i + 1);
      if (rest.startsWith(']') || rest.startsWith('^]')) throw new Error("a class opening with ']' is not taken (write \\] instead)");
      inClass = true;
      out += c;
    } else if (c === '(' && source[i + 1] === '?') {
      const [js, taken] = group(source.slice(i));
      out += js;
      i += taken - 1;
    } else {
      out += c;
    }
  }
  try {
    return new RegExp(out);
  } catch (err) {
    throw new Error((err as Error).message);
  }
}

// '(?:' and named groups pass ('(?P<name>' as JavaScript spells it); other '(?' forms are flags or
// lookarounds. Returns the JavaScript text and how many characters of the source it stands for.
function group(rest: string): [string, number] {
  if (rest.startsWith('(?:')) return ['(?:', 3];
  if (rest.startsWith('(?P<')) return ['(?<', 4];
  if (/^\(\?<[A-Za-z_]/.test(rest)) return ['(?<', 3];
  throw new Error(`'${rest.slice(0, 4)}' is not taken: inline flags and lookarounds are not supported`);
}

// Go's Regexp.Expand: $name or ${name}, a name being the longest run of letters, digits and '_'; a
// number is a group's index, anything else a group's name; unknown ones give ''. '$$' is '$', and
// a '$' not followed by a name stays as it is.
export function expandGoTemplate(template: string, m: RegExpExecArray): string {
  return template.replace(/\$(?:\$|\{([A-Za-z0-9_]+)\}|([A-Za-z0-9_]+))/g, (all, braced?: string, bare?: string) => {
    if (all === '$$') return '$';
    const name = (braced ?? bare)!;
    if (/^\d+$/.test(name)) return m[Number(name)] ?? '';
    return m.groups?.[name] ?? '';
  });
}
