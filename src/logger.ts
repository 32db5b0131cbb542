import pino, { type Logger } from 'pino';
import type { LogLevel } from './settings';

export type { Logger };

// JSON lines on stdout: one per startup and config event, request lines at debug.
export function createLogger(level: LogLevel, destination?: pino.DestinationStream): Logger {
  const options: pino.LoggerOptions = {
    level,
    base: { service: 'sluice' },
    timestamp: pino.stdTimeFunctions.isoTime,
    formatters: { level: (label) => ({ level: label }) },
  };
  return destination === undefined ? pino(options) : pino(options, destination);
}
