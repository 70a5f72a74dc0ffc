import { pino, type DestinationStream, type Logger } from 'pino';

export type { Logger };

/**
 * The process logger: pino JSON lines. Parts take child loggers (`{part: "view"}`); tests pass an
 * in-memory destination and read the lines back instead of scraping stdout.
 */
export function createLogger(level: string, destination?: DestinationStream): Logger {
  return pino(
    {
      level,
      base: { service: 'sandgate' },
      // Credentials never reach the log even when a header map is logged whole.
      redact: {
        paths: ['headers.authorization', 'headers["x-api-key"]', 'headers["x-access-token"]', 'headers["e2b-traffic-access-token"]', 'token', 'secret'],
        censor: '[redacted]',
      },
    },
    destination,
  );
}

/** A log sink that keeps parsed lines in memory (tests, and `sandgate` embedded in other programs). */
export class MemoryLogSink implements DestinationStream {
  readonly lines: Record<string, unknown>[] = [];
  readonly raw: string[] = [];

  write(chunk: string): void {
    this.raw.push(chunk);
    for (const line of chunk.split('\n')) if (line.trim() !== '') this.lines.push(JSON.parse(line) as Record<string, unknown>);
  }

  find(predicate: (line: Record<string, unknown>) => boolean): Record<string, unknown> | undefined {
    return this.lines.find(predicate);
  }
}
