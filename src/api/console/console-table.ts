import { formatDuration } from '../../domain/duration.js';
import type { ActivityReadout } from '../../domain/sandbox.js';
import type { ViewEntry } from '../../view/sandbox-view.js';

/**
 * The console without JavaScript: one static HTML table of the sandboxes the caller may see, for `curl`,
 * text browsers and screen readers that prefer a plain document. Bounded (`limit` rows, filters in the
 * query string) so a 100k-sandbox view never renders a 100k-row page by accident.
 */

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

/** HTML-escapes text for element content and quoted attribute values. */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ESCAPES[c]!);
}

export interface TableFilter {
  readonly namespace: string | null;
  readonly phase: string | null;
  readonly limit: number;
}

function endpointText(e: ViewEntry): string {
  const ep = e.snapshot.endpoint;
  switch (ep.kind) {
    case 'address':
      return ep.addresses.join(', ');
    case 'service':
      return ep.fqdn;
    case 'relay':
      return 'relay';
  }
}

/** "idle for 3m 20s" while Ready, else the idle controller's last decision, else —. */
function activityText(e: ViewEntry, activity: ActivityReadout, now: number): string {
  const since = activity.idleSince(e.key);
  if (since !== undefined) return `idle for ${formatDuration(Math.max(0, now - since))}`;
  return activity.noteOf(e.key)?.decision ?? '—';
}

function row(e: ViewEntry, activity: ActivityReadout, now: number): string {
  const p = e.presence;
  const cells = [
    e.namespace,
    e.name,
    e.snapshot.ids.join(' '),
    e.status.phase,
    e.status.reason,
    e.status.rule,
    p === undefined ? '—' : `${p.gatewayId} since ${new Date(p.since).toISOString()}`,
    endpointText(e),
    e.driver,
    activityText(e, activity, now),
  ];
  return `<tr>${cells.map((c) => `<td>${escapeHtml(c)}</td>`).join('')}</tr>`;
}

export function renderTable(entries: Iterable<ViewEntry>, activity: ActivityReadout, visible: (namespace: string) => boolean, filter: TableFilter, gatewayId: string, now: number): string {
  const rows: string[] = [];
  let matched = 0;
  for (const e of entries) {
    if (!visible(e.namespace)) continue;
    if (filter.namespace !== null && e.namespace !== filter.namespace) continue;
    if (filter.phase !== null && e.status.phase !== filter.phase) continue;
    matched++;
    if (rows.length < filter.limit) rows.push(row(e, activity, now));
  }
  const note = matched > rows.length ? `<p>Showing ${rows.length} of ${matched} sandboxes: narrow with <code>?namespace=</code>, <code>?phase=</code> or raise <code>?limit=</code>.</p>` : `<p>${matched} sandboxes.</p>`;
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>sandgate sandboxes — ${escapeHtml(gatewayId)}</title></head>
<body>
<h1>sandgate sandboxes</h1>
<p>Gateway ${escapeHtml(gatewayId)}. The live console is at <a href="/console">/console</a>.</p>
${note}
<table>
<thead><tr><th>namespace</th><th>name</th><th>ids</th><th>phase</th><th>reason</th><th>rule</th><th>session</th><th>endpoint</th><th>driver</th><th>activity</th></tr></thead>
<tbody>
${rows.join('\n')}
</tbody>
</table>
</body></html>
`;
}
