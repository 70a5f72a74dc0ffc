import { SandgateError } from '../domain/errors.js';

/**
 * Start-up failures as one sentence an operator can act on: which flag to change, the address and the
 * cause — `--proxy-port 8080 is already in use (address 0.0.0.0:8080)` — instead of a stack trace.
 */

/** The system error code of a failed bind or host lookup (`EADDRINUSE`, `ENOTFOUND`, …). */
function errnoOf(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | undefined)?.code;
  return typeof code === 'string' ? code : undefined;
}

/** `listen_failed` for a listener (`--proxy-port`) that could not bind `host:port`. */
export function listenFailed(portFlag: string, host: string, port: number, err: unknown): SandgateError {
  const address = `${host.includes(':') ? `[${host}]` : host}:${port}`;
  let sentence: string;
  switch (errnoOf(err)) {
    case 'EADDRINUSE':
      sentence = `${portFlag} ${port} is already in use (address ${address})`;
      break;
    case 'EACCES':
    case 'EPERM':
      sentence = `${portFlag} ${port} needs privileges this process does not have (address ${address}); choose a port above 1023`;
      break;
    case 'EADDRNOTAVAIL':
      sentence = `--listen-host ${host} is not an address of this machine (${portFlag} ${port})`;
      break;
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
    case 'EAI_NONAME':
      sentence = `--listen-host ${host} does not resolve (${portFlag} ${port})`;
      break;
    default:
      sentence = `${portFlag} ${port} cannot be bound (address ${address}): ${(err as Error | undefined)?.message ?? String(err)}`;
  }
  return new SandgateError('listen_failed', sentence, { cause: err });
}

/** `start_failed` for a part that the option `flag` configures (a key store, a driver) and that could not start. */
export function startFailed(flag: string, what: string, err: unknown): SandgateError {
  if (err instanceof SandgateError) return err;
  return new SandgateError('start_failed', `${what} (${flag}) did not start: ${(err as Error | undefined)?.message ?? String(err)}`, { cause: err });
}
