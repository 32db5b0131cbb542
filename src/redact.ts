// A URL (Redis, or any with a user and password: OTLP, xDS) fit for logs and messages: the
// credentials become [redacted]. They run from after the scheme's '://' (from the start without
// one) to the last '@', the rule store/redis/connection.ts parses by, since a password pasted
// unencoded may itself hold '@', ':', '/' or '//'; a user name (up to the first ':', which a user
// name cannot hold) stays. In a list (cluster nodes) everything from the first entry to the last
// '@' is hidden: a password may hold ',' too.
export function redactRedisUrl(url: string): string {
  const at = url.lastIndexOf('@');
  if (at < 0) return url;
  const scheme = /^[A-Za-z][A-Za-z0-9+.-]*:\/\//.exec(url);
  const start = scheme !== null && scheme[0].length <= at ? scheme[0].length : 0;
  const colon = url.indexOf(':', start);
  const keep = colon >= 0 && colon < at ? colon + 1 : start;
  return `${url.slice(0, keep)}[redacted]${url.slice(at)}`;
}
