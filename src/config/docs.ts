import { exactDuration } from '../domain/duration.js';
import { SCHEMA, envOf, flagOf, type OptionSpec } from './schema.js';

/** The option table of docs/configuration.md, generated from the schema. */
export function configMarkdown(): string {
  const rows = Object.entries(SCHEMA).map(([name, s]) => {
    const spec = s as OptionSpec;
    const def = spec.kind === 'duration' ? (spec.default === 0 ? '0' : exactDuration(spec.default)) : Array.isArray(spec.default) ? spec.default.join(',') : String(spec.default);
    const allowed = 'values' in spec && spec.values !== undefined ? ` One of: ${spec.values.join(', ')}.` : '';
    return `| \`${flagOf(name)}\` | \`${envOf(name)}\` | \`${name}\` | ${def === '' ? '(empty)' : `\`${def}\``} | ${spec.description}${allowed} |`;
  });
  return ['| flag | environment | file key | default | meaning |', '|---|---|---|---|---|', ...rows, ''].join('\n');
}
