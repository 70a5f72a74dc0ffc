// The sandboxes table, virtualised: a fixed row height, a spacer as tall as all matching rows, and a
// small pool of row elements re-used for whatever is in view. 100k sandboxes cost 100k keys in an array,
// not 100k DOM rows. Keyboard: the grid is one tab stop; arrows, Page Up/Down, Home/End move the
// selection (aria-activedescendant names it), Enter opens the detail, Escape closes it.

const ROW_H = 28;
const OVERSCAN = 8;
const COLUMNS = ['namespace', 'name', 'ids', 'phase', 'reason', 'rule', 'session', 'endpoint', 'driver', 'activity'];

function ago(iso, now) {
  const s = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  if (s < 90) return `${s}s`;
  if (s < 5400) return `${Math.round(s / 60)}m`;
  if (s < 172_800) return `${Math.round(s / 3600)}h`;
  return `${Math.round(s / 86_400)}d`;
}

/** The activity cell: "idle for 3m" while Ready, else the idle controller's last decision, else —. */
export function activityText(s, now) {
  const idle = s.idle;
  if (idle === undefined) return '—';
  if (idle.since !== null) return `idle for ${ago(idle.since, now)}`;
  return idle.decision === null ? '—' : idle.decision.decision;
}

/** Its tooltip: the last activity, the timeout and the last decision's reason. */
function activityTitle(s) {
  if (s.idle === undefined) return '';
  const parts = [`last activity: ${s.lastActivity === null ? 'none seen' : s.lastActivity.at}`, `idle timeout: ${s.idle.timeoutMs > 0 ? `${s.idle.timeoutMs / 1000}s` : 'never'}`];
  if (s.idle.decision !== null) parts.push(`${s.idle.decision.decision}: ${s.idle.decision.reason}`);
  return parts.join('\n');
}

export function endpointText(ep) {
  if (ep.kind === 'address') return ep.addresses.join(', ');
  if (ep.kind === 'service') return ep.fqdn;
  return 'relay';
}

export class SandboxTable {
  constructor(root, store, { onOpen, onClose }) {
    this.store = store;
    this.onOpen = onOpen;
    this.onClose = onClose;
    this.filter = { text: '', phase: '', namespace: '' };
    this.matching = [];
    this.seenGeneration = -1;
    this.selected = undefined;
    this.pool = [];
    this.frame = 0;

    const head = document.createElement('div');
    head.className = 'row head';
    head.setAttribute('role', 'row');
    for (const c of COLUMNS) {
      const cell = document.createElement('span');
      cell.setAttribute('role', 'columnheader');
      cell.textContent = c;
      head.append(cell);
    }
    this.viewport = document.createElement('div');
    this.viewport.className = 'viewport';
    this.viewport.tabIndex = 0;
    this.viewport.id = 'table-viewport';
    this.spacer = document.createElement('div');
    this.spacer.className = 'spacer';
    this.empty = document.createElement('div');
    this.empty.className = 'empty';
    this.empty.hidden = true;
    this.viewport.append(head, this.spacer, this.empty);
    root.append(this.viewport);
    root.setAttribute('aria-colcount', String(COLUMNS.length));

    this.viewport.addEventListener('scroll', () => this.schedule());
    this.viewport.addEventListener('keydown', (e) => this.key(e));
    this.viewport.addEventListener('click', (e) => {
      const row = e.target.closest('.row[data-key]');
      if (row !== null) this.select(row.dataset.key, true);
    });
    new ResizeObserver(() => this.schedule()).observe(this.viewport);
  }

  setFilter(filter) {
    this.filter = filter;
    this.seenGeneration = -1;
    this.schedule();
  }

  /** Renders on the next animation frame (many watch events → one render). */
  schedule() {
    if (this.frame !== 0) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.render();
    });
  }

  refilter() {
    const keys = this.store.ordered();
    const { text, phase, namespace } = this.filter;
    if (text === '' && phase === '' && namespace === '') {
      this.matching = keys;
    } else {
      const rows = this.store.rows;
      const out = [];
      for (const k of keys) {
        const s = rows.get(k);
        if (phase !== '' && s.phase !== phase) continue;
        if (namespace !== '' && s.namespace !== namespace) continue;
        if (text !== '' && !s.search.includes(text)) continue;
        out.push(k);
      }
      this.matching = out;
    }
    this.seenGeneration = this.store.generation;
  }

  render() {
    if (this.seenGeneration !== this.store.generation) this.refilter();
    const n = this.matching.length;
    this.root().setAttribute('aria-rowcount', String(n + 1));
    this.spacer.style.height = `${n * ROW_H}px`;
    this.empty.hidden = n > 0;
    if (n === 0) this.empty.textContent = this.store.synced ? 'No sandbox matches.' : 'Loading sandboxes…';
    const top = this.viewport.scrollTop;
    const height = this.viewport.clientHeight;
    const first = Math.max(0, Math.floor(top / ROW_H) - OVERSCAN);
    const last = Math.min(n, Math.ceil((top + height) / ROW_H) + OVERSCAN);
    const want = last - first;
    while (this.pool.length < want) this.pool.push(this.makeRow());
    const now = Date.now();
    for (let i = 0; i < this.pool.length; i++) {
      const el = this.pool[i];
      if (i >= want) {
        el.hidden = true;
        continue;
      }
      const index = first + i;
      const key = this.matching[index];
      this.fill(el, this.store.rows.get(key), index, now);
    }
    this.onRendered?.(n);
  }

  root() {
    return this.viewport.parentElement;
  }

  makeRow() {
    const el = document.createElement('div');
    el.className = 'row';
    el.setAttribute('role', 'row');
    for (let c = 0; c < COLUMNS.length; c++) {
      const cell = document.createElement('span');
      cell.setAttribute('role', 'gridcell');
      el.append(cell);
    }
    const badge = document.createElement('span');
    el.children[3].append(badge);
    this.viewport.append(el);
    return el;
  }

  fill(el, s, index, now) {
    el.hidden = false;
    // Row ids are by position so aria-activedescendant stays valid when rows are recycled.
    el.id = `row-${index}`;
    el.dataset.key = s.key;
    el.setAttribute('aria-rowindex', String(index + 2));
    el.style.transform = `translateY(${(index + 1) * ROW_H}px)`;
    const selected = s.key === this.selected;
    el.classList.toggle('selected', selected);
    el.setAttribute('aria-selected', String(selected));
    const c = el.children;
    c[0].textContent = s.namespace;
    c[1].textContent = s.name;
    c[2].textContent = s.ids.join(' ');
    const badge = c[3].firstChild;
    badge.className = `phase phase-${s.phase}`;
    badge.textContent = s.phase;
    c[4].textContent = s.reason;
    c[4].title = s.message;
    c[5].textContent = s.rule;
    c[6].textContent = s.session === null ? '—' : `${s.session.gatewayId} · ${ago(s.session.since, now)}`;
    c[7].textContent = endpointText(s.endpoint);
    c[8].textContent = s.driver;
    c[9].textContent = activityText(s, now);
    c[9].title = activityTitle(s);
  }

  select(key, open) {
    this.selected = key;
    const index = this.matching.indexOf(key);
    if (index >= 0) {
      const y = index * ROW_H;
      const view = this.viewport;
      const headH = ROW_H;
      if (y < view.scrollTop) view.scrollTop = y;
      else if (y + ROW_H + headH > view.scrollTop + view.clientHeight) view.scrollTop = y + ROW_H + headH - view.clientHeight;
      view.setAttribute('aria-activedescendant', `row-${index}`);
    }
    this.render();
    if (open) this.onOpen(key);
  }

  key(e) {
    const n = this.matching.length;
    if (n === 0) return;
    let index = this.selected === undefined ? -1 : this.matching.indexOf(this.selected);
    const page = Math.max(1, Math.floor(this.viewport.clientHeight / ROW_H) - 1);
    switch (e.key) {
      case 'ArrowDown': index = Math.min(n - 1, index + 1); break;
      case 'ArrowUp': index = Math.max(0, index - 1); break;
      case 'PageDown': index = Math.min(n - 1, index + page); break;
      case 'PageUp': index = Math.max(0, index - page); break;
      case 'Home': index = 0; break;
      case 'End': index = n - 1; break;
      case 'Enter':
        if (this.selected !== undefined) this.onOpen(this.selected);
        e.preventDefault();
        return;
      case 'Escape':
        this.onClose();
        e.preventDefault();
        return;
      default:
        return;
    }
    e.preventDefault();
    this.select(this.matching[Math.max(0, index)], false);
    // The detail follows the selection once it is open.
    this.onMove?.(this.selected);
  }
}
