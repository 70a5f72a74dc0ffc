// One sandbox in full: its phase and why (the composition rule in words), conditions with their times,
// the session and who holds it, and its recent phase changes as the gateway recorded them. Re-rendered
// when the sandbox changes while open. Everything is set as text, never as HTML: names and messages come
// from tenants.

import { endpointText } from './sandbox-table.js';

function el(tag, text, className) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  if (className !== undefined) e.className = className;
  return e;
}

function badge(phase) {
  return el('span', phase, `phase phase-${phase}`);
}

function time(iso) {
  if (iso === undefined || iso === null || iso === '') return '—';
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? iso : d.toLocaleString();
}

function facts(pairs) {
  const dl = el('dl');
  for (const [k, v] of pairs) {
    dl.append(el('dt', k));
    const dd = el('dd');
    if (v instanceof Node) dd.append(v);
    else dd.textContent = v;
    dl.append(dd);
  }
  return dl;
}

/** The rule that decided the phase, in words ("Provisioning because the backend is ready but …"). */
export function explainRule(rules, s) {
  const r = rules.find((x) => x.name === s.rule);
  if (r === undefined) return `Rule ${s.rule}.`;
  return `${s.phase} by rule “${r.name}”: ${r.when}.`;
}

/**
 * `actions` (the "open in browser" form) is kept across re-renders — never detached, so what is typed in it
 * and its focus survive the sandbox changing while it is open.
 */
export function renderDetail(aside, s, { rules, changes, onClose, actions }) {
  for (const c of [...aside.childNodes]) if (c !== actions) c.remove();
  const close = el('button', 'Close (Esc)');
  close.type = 'button';
  close.addEventListener('click', onClose);
  const title = el('h2', `${s.namespace}/${s.name} `);
  title.append(badge(s.phase));
  aside.prepend(close, title);
  if (actions !== undefined && actions.parentNode !== aside) aside.append(actions);
  aside.append(el('p', explainRule(rules, s)));
  aside.append(
    facts([
      ['reason', s.reason],
      ['message', s.message || '—'],
      ['ids', s.ids.join(', ') || '—'],
      ['endpoint', `${endpointText(s.endpoint)}${s.ports === null ? '' : ' ports ' + s.ports.join(', ')}`],
      ['public ports', Array.isArray(s.publicPorts) ? `${s.publicPorts.join(', ')} (no credential needed)` : 'none'],
      ['session model', s.sessionModel],
      ['driver', s.driver],
      ['uid', s.uid],
      ['resourceVersion', s.resourceVersion],
      ['instance', s.instanceId],
    ]),
  );
  aside.append(el('h3', 'Supervisor session'));
  if (s.session === null) aside.append(el('p', s.sessionModel === 'required' ? 'No live session anywhere in the cluster.' : 'None needed (session model none).'));
  else {
    aside.append(
      facts([
        ['gateway', s.session.gatewayId],
        ['since', time(s.session.since)],
        ['session', s.session.sessionId],
        ['instance', s.session.instanceId],
        ['epoch', String(s.session.epoch)],
      ]),
    );
  }
  if (s.idle !== undefined) {
    aside.append(el('h3', 'Activity'));
    const ports = s.lastActivity === null ? [] : Object.entries(s.lastActivity.ports).map(([port, at]) => [`port ${port}`, time(at)]);
    aside.append(
      facts([
        ['last activity', time(s.lastActivity?.at)],
        ...ports,
        ['idle since', time(s.idle.since)],
        ['idle timeout', s.idle.timeoutMs > 0 ? `${s.idle.timeoutMs / 1000} s` : 'never'],
        ['last decision', s.idle.decision === null ? '—' : `${s.idle.decision.decision} at ${time(s.idle.decision.at)}: ${s.idle.decision.reason}`],
      ]),
    );
  }
  aside.append(el('h3', 'Conditions'));
  const table = el('table', undefined, 'plain');
  const head = el('tr');
  for (const h of ['type', 'status', 'reason', 'message', 'since']) {
    const th = el('th', h);
    th.scope = 'col';
    head.append(th);
  }
  table.append(el('thead'));
  table.firstChild.append(head);
  const body = el('tbody');
  for (const c of s.conditions) {
    const tr = el('tr');
    for (const v of [c.type, c.status, c.reason, c.message || '—', time(c.lastTransitionTime)]) tr.append(el('td', v));
    body.append(tr);
  }
  table.append(body);
  aside.append(table);
  aside.append(el('h3', 'Recent phase changes'));
  if (changes === undefined) aside.append(el('p', 'Loading…'));
  else if (changes.length === 0) aside.append(el('p', 'None recorded by this gateway.'));
  else {
    const ol = el('ol', undefined, 'changes');
    for (const c of changes) {
      const li = el('li');
      li.append(el('span', `${new Date(c.at).toLocaleTimeString()} `));
      if (c.from === null) li.append(el('span', 'appeared as '), badge(c.to));
      else if (c.to === null) li.append(badge(c.from), el('span', ' → left the view'));
      else li.append(badge(c.from), el('span', ' → '), badge(c.to));
      if (c.to !== null) li.append(el('span', ` ${c.reason} (${c.rule})`));
      ol.append(li);
    }
    aside.append(ol);
  }
}
