// The gateways view: every gateway with a live presence lease, its relay address, how soon its lease
// lapses unless renewed, and how many supervisor sessions it holds (of the sandboxes this key may see).

function cell(tr, text) {
  const td = document.createElement('td');
  td.textContent = text;
  tr.append(td);
}

export function renderGateways(body, state, g) {
  state.replaceChildren();
  const kind = document.createElement('span');
  kind.textContent = `Presence: ${g.presence === 'redis' ? 'Redis (shared by every gateway)' : 'in memory (this gateway only)'}. `;
  state.append(kind);
  const health = document.createElement('span');
  if (g.degraded.length > 0) {
    health.className = 'degraded';
    health.textContent = `Degraded — ${g.degraded.join('; ')}`;
  } else health.textContent = 'Healthy.';
  state.append(health);
  body.replaceChildren();
  for (const gw of g.gateways) {
    const tr = document.createElement('tr');
    cell(tr, gw.gatewayId + (gw.self ? ' (this gateway)' : '') + (gw.live ? '' : ' (lease lapsed)'));
    cell(tr, gw.relay ?? '—');
    cell(tr, gw.expiresInMs === null ? (gw.self ? 'held in memory' : '—') : `${(gw.expiresInMs / 1000).toFixed(1)} s`);
    cell(tr, String(gw.sessions));
    body.append(tr);
  }
}
