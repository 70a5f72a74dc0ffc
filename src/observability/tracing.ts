import { SandgateError } from '../domain/errors.js';
import type { Tracing } from './otel-tracer.js';

/**
 * Whether and how tracing is on, read from the standard `OTEL_*` environment variables. The
 * OpenTelemetry SDK and its exporter (otel-tracer.ts) are loaded only when tracing is on, so a gateway
 * without tracing neither imports nor constructs any of it.
 */

/** Whether the environment turns tracing on. */
export function tracingConfigured(env: NodeJS.ProcessEnv): boolean {
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') return false;
  const exporters = (env.OTEL_TRACES_EXPORTER ?? '').toLowerCase().split(',').map((s) => s.trim());
  if (exporters.includes('none')) return false;
  if (exporters.includes('otlp')) return true;
  return (env.OTEL_EXPORTER_OTLP_ENDPOINT ?? '') !== '' || (env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ?? '') !== '';
}

/** The one OTLP protocol this build exports with; anything else is a configuration error, not a silent fallback. */
function checkProtocol(env: NodeJS.ProcessEnv): void {
  const p = env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ?? env.OTEL_EXPORTER_OTLP_PROTOCOL;
  if (p !== undefined && p !== '' && p !== 'http/protobuf') {
    throw new SandgateError('config_invalid', `OTEL_EXPORTER_OTLP_PROTOCOL ${JSON.stringify(p)}: sandgate exports traces over OTLP http/protobuf only`);
  }
  const exporters = (env.OTEL_TRACES_EXPORTER ?? '').split(',').map((s) => s.trim()).filter((s) => s !== '' && s !== 'otlp');
  if (exporters.length > 0) throw new SandgateError('config_invalid', `OTEL_TRACES_EXPORTER ${JSON.stringify(env.OTEL_TRACES_EXPORTER)}: sandgate exports traces with otlp only (or none)`);
}

/** The gateway's tracing from the environment: undefined (and the SDK not even loaded) unless it turns tracing on. */
export async function tracingFromEnv(env: NodeJS.ProcessEnv, gatewayId: string): Promise<Tracing | undefined> {
  if (!tracingConfigured(env)) return undefined;
  checkProtocol(env);
  const { Tracing } = await import('./otel-tracer.js');
  return new Tracing(gatewayId);
}
