// The closed set of errors sluice raises on purpose. server/status.ts maps them to gRPC and HTTP
// status codes in one place; anything else is a bug and answers INTERNAL.

// One problem in one config file. The message always starts with the file name (and line, when
// the YAML parser or the node position gives it), as `sluice check` prints it.
export class ConfigError extends Error {
  readonly file: string;
  readonly line?: number;
  readonly detail: string;

  constructor(file: string, detail: string, line?: number) {
    super(line === undefined ? `${file}: ${detail}` : `${file}:${line}: ${detail}`);
    this.name = 'ConfigError';
    this.file = file;
    this.line = line;
    this.detail = detail;
  }
}

// Every problem found while loading a set of config files; loading never stops at the first one.
export class ConfigErrors extends Error {
  readonly errors: ConfigError[];

  constructor(errors: ConfigError[]) {
    super(errors.map((e) => e.message).join('\n'));
    this.name = 'ConfigErrors';
    this.errors = errors;
  }
}

// A configuration mistake found at start (a setting, a flag, a file a setting names, a port it
// cannot listen on): its message names the setting and is printed as it is, without a stack
// trace. Raised before anything serves, so it never reaches a call: status.ts has no code for it.
export class SettingsError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SettingsError';
  }
}

// The request itself is malformed → INVALID_ARGUMENT (gRPC) / 400 (HTTP).
export class InvalidRequestError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'InvalidRequestError';
  }
}

// No decision can be made (no config loaded, store unreachable) → UNAVAILABLE / 503, so that the
// caller's own failure mode (Envoy's failure_mode_deny) decides. Never answered as UNKNOWN.
export class UnavailableError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'UnavailableError';
  }
}

// The caller reset its call before the store was asked (Envoy's timeout, or an attacker's Rapid
// Reset): nothing was decided or written → CANCELLED / 499. Not a store failure: the breaker, the
// fallback and the degraded statistics never see it.
export class CancelledError extends Error {
  constructor(message = 'the caller cancelled the call before it was decided') {
    super(message);
    this.name = 'CancelledError';
  }
}
