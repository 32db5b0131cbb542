import pino, { type Logger } from 'pino';
import pinoPretty from 'pino-pretty';

// LOG_LEVEL and LOG_FORMAT's choices (settings/table.ts): what this logger can do.
export type LogLevel = 'trace' | 'debug' | 'info' | 'warn' | 'error' | 'fatal' | 'silent';
export type LogFormat = 'json' | 'pretty';

export type { Logger };

export interface LoggerOptions {
  // json (the default: one JSON object per line, for log collectors) or pretty (for a person at a
  // terminal: time, level and message on one line, colours when the terminal has them).
  format?: LogFormat;
}

// Fields a person reading the pretty lines does not need: the start-up settings dump is the same
// as GET /settings on the admin port, and the message already says what `event`, `warning` and
// `build` (the version) say.
const PRETTY_IGNORE = 'pid,hostname,service,event,settings,warning,build';

// Log lines on stdout: one per startup and config event, request lines at debug.
export function createLogger(level: LogLevel, destination?: pino.DestinationStream, options: LoggerOptions = {}): Logger {
  const pinoOptions: pino.LoggerOptions = {
    level,
    base: { service: 'sluice' },
    timestamp: pino.stdTimeFunctions.isoTime,
    formatters: { level: (label) => ({ level: label }) },
  };
  if (options.format === 'pretty') {
    // In this thread and synchronous (no worker transport): the last lines before an exit are kept.
    const pretty = pinoPretty({ destination: destination ?? 1, sync: true, ignore: PRETTY_IGNORE, singleLine: true, translateTime: 'SYS:HH:MM:ss.l' });
    return pino(pinoOptions, pretty);
  }
  return destination === undefined ? pino(pinoOptions) : pino(pinoOptions, destination);
}

// A warning that can repeat in a burst (every call failing in an outage, an attacker reconnecting
// in a loop) is logged at most once every `everyMs`; counters still count every occurrence. Call
// the returned function for every occurrence: it answers how many went unlogged since the last
// line when this one is to be logged, and undefined when it is not.
export function logEvery(everyMs: number): () => number | undefined {
  let last = -Infinity;
  let unlogged = 0;
  return () => {
    const now = Date.now();
    if (now - last < everyMs) {
      unlogged++;
      return undefined;
    }
    last = now;
    const skipped = unlogged;
    unlogged = 0;
    return skipped;
  };
}
