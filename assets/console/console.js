// The operator console: wires the watch (sandboxes), the polled JSON routes (gateways, stats) and the
// views. The API key, when one is needed, lives in sessionStorage (this tab only) and travels in the
// header the gateway names in the page — never in a URL.

import { Charts } from './charts.js';
import { renderGateways } from './gateways-view.js';
import { openLinkForm } from './open-link.js';
import { renderDetail } from './sandbox-detail.js';
import { SandboxStore } from './sandbox-store.js';
import { SandboxTable } from './sandbox-table.js';
import { followEvents } from './sse-reader.js';

const KEY_STORAGE = 'sandgate-api-key';
const keyHeader = document.querySelector('meta[name="sandgate-api-key-header"]').content;
const $ = (id) => document.getElementById(id);

const state = {
  key: sessionStorage.getItem(KEY_STORAGE) ?? '',
  rules: [],
  open: undefined,
  watch: undefined,
  timers: [],
};

function headers() {
  return state.key === '' ? {} : { [keyHeader]: state.key };
}

class Unauthorized extends Error {}

async function getJson(path) {
  const res = await fetch(path, { headers: headers(), cache: 'no-store' });
  if (res.status === 401 || res.status === 403) {
    const body = await res.json().catch(() => ({}));
    throw new Unauthorized(body.message ?? `HTTP ${res.status}`);
  }
  if (!res.ok) throw new Error(`${path}: HTTP ${res.status}`);
  return res.json();
}

const store = new SandboxStore();
const detail = $('detail');
const table = new SandboxTable($('table'), store, {
  onOpen: (key) => openDetail(key),
  onClose: () => closeDetail(),
});
table.onMove = (key) => {
  if (state.open !== undefined) openDetail(key);
};
table.onRendered = (n) => {
  $('shown').textContent = `${n.toLocaleString()} of ${store.rows.size.toLocaleString()} shown${store.synced ? '' : ' (loading…)'}`;
};

// The open sandbox's phase changes, fetched when it is opened and again whenever its row changes.
const changes = { key: undefined, row: undefined, items: undefined };
// The open sandbox's "open in browser" form: made when a sandbox is opened, kept while it stays open.
const actions = { key: undefined, node: undefined };

function openDetail(key) {
  const s = store.rows.get(key);
  if (s === undefined) return closeDetail();
  state.open = key;
  detail.hidden = false;
  if (actions.key !== key) {
    actions.node?.remove();
    actions.key = key;
    actions.node = openLinkForm(s, headers);
  }
  if (changes.key !== key) changes.items = undefined;
  if (changes.key !== key || changes.row !== s) {
    changes.key = key;
    changes.row = s;
    const q = new URLSearchParams({ namespace: s.namespace, name: s.name });
    getJson(`/console/api/phase-changes?${q}`)
      .then((r) => {
        if (changes.row !== s) return;
        changes.items = r.items;
        if (state.open === key) renderDetail(detail, s, { rules: state.rules, changes: changes.items, onClose: closeDetail, actions: actions.node });
      })
      .catch((err) => {
        if (err instanceof Unauthorized) askForKey(err.message);
      });
  }
  renderDetail(detail, s, { rules: state.rules, changes: changes.items, onClose: closeDetail, actions: actions.node });
}

function closeDetail() {
  state.open = undefined;
  detail.hidden = true;
  $('table-viewport').focus();
}

// Header counts and the namespace filter follow the store at most once per frame.
let countsFrame = 0;
let namespaceGeneration = -1;
function refreshSummary() {
  if (countsFrame !== 0) return;
  countsFrame = requestAnimationFrame(() => {
    countsFrame = 0;
    const counts = $('counts');
    counts.replaceChildren();
    for (const phase of [...store.phaseCounts.keys()].sort()) {
      const b = document.createElement('span');
      b.className = `phase phase-${phase}`;
      b.textContent = `${phase} ${store.phaseCounts.get(phase).toLocaleString()}`;
      counts.append(b);
    }
    if (namespaceGeneration !== store.namespaceGeneration) {
      namespaceGeneration = store.namespaceGeneration;
      const select = $('ns-filter');
      const chosen = select.value;
      const options = [new Option('all', '')];
      // A namespace list the size of the view would be no filter at all: offer it while it is short.
      const names = [...store.namespaceCounts.keys()].sort();
      for (const ns of names.slice(0, 500)) options.push(new Option(ns, ns));
      select.replaceChildren(...options);
      select.value = names.includes(chosen) ? chosen : '';
    }
    if (state.open !== undefined) openDetail(state.open);
  });
}

function setConnection(text, cls) {
  const c = $('connection');
  c.textContent = text;
  c.className = `conn ${cls}`;
}

function askForKey(message) {
  stopAll();
  setConnection('API key needed', 'down');
  $('key-form').hidden = false;
  $('key-error').textContent = message;
  $('key-input').focus();
}

function stopAll() {
  state.watch?.stop();
  state.watch = undefined;
  for (const t of state.timers) clearInterval(t);
  state.timers = [];
}

function startWatch() {
  state.watch = followEvents({
    url: '/v1/sandboxes/watch',
    headers,
    onEvent(type, data) {
      switch (type) {
        case 'reset':
          store.reset();
          break;
        case 'upsert':
          store.upsert(JSON.parse(data));
          break;
        case 'delete': {
          const d = JSON.parse(data);
          store.delete(d.namespace, d.name);
          break;
        }
        case 'synced':
          store.markSynced();
          document.body.dataset.synced = 'true';
          break;
        default:
          return;
      }
      table.schedule();
      refreshSummary();
    },
    onState(s, detailInfo) {
      if (s === 'live') setConnection('live', 'live');
      else if (s === 'reconnecting') setConnection(`reconnecting (${detailInfo?.message ?? 'connection lost'})`, 'down');
      else if (s === 'unauthorized') askForKey(detailInfo.body?.message ?? 'The API key was refused.');
    },
  });
}

function poll(fn, ms) {
  const run = () =>
    fn().catch((err) => {
      if (err instanceof Unauthorized) askForKey(err.message);
    });
  void run();
  state.timers.push(setInterval(run, ms));
}

async function start() {
  stopAll();
  $('key-form').hidden = true;
  let overview;
  try {
    overview = await getJson('/console/api/overview');
  } catch (err) {
    if (err instanceof Unauthorized) return askForKey(err.message);
    setConnection(`cannot reach the gateway (${err.message})`, 'down');
    setTimeout(start, 2000);
    return;
  }
  state.rules = overview.rules;
  $('gateway').textContent = `gateway ${overview.gatewayId}`;
  const phase = $('phase-filter');
  if (phase.options.length === 1) for (const p of overview.phases) phase.append(new Option(p, p));
  startWatch();
  poll(async () => renderGateways($('gateways-body'), $('presence-state'), await getJson('/console/api/gateways')), 2000);
  poll(async () => charts?.add(await getJson('/console/api/stats')), 1000);
}

// Charts need uPlot; without it (a blocked script) the rest of the console still works.
let charts;
try {
  charts = new Charts({ decisions: $('chart-decisions'), latency: $('chart-latency'), waits: $('chart-waits'), namespaces: $('chart-namespaces') });
} catch (err) {
  console.error('charts unavailable', err);
}

// Filters: typing re-filters once per frame.
function applyFilter() {
  table.setFilter({ text: $('search').value.trim().toLowerCase(), phase: $('phase-filter').value, namespace: $('ns-filter').value });
}
$('search').addEventListener('input', applyFilter);
$('phase-filter').addEventListener('change', applyFilter);
$('ns-filter').addEventListener('change', applyFilter);

document.addEventListener('keydown', (e) => {
  const typing = e.target instanceof HTMLInputElement || e.target instanceof HTMLSelectElement;
  if (e.key === '/' && !typing) {
    e.preventDefault();
    $('search').focus();
  } else if (e.key === 'Escape' && state.open !== undefined) closeDetail();
});

// Tabs (WAI-ARIA tabs pattern: arrows move between tabs).
const tabs = [$('tab-sandboxes'), $('tab-gateways')];
function selectTab(tab) {
  for (const t of tabs) {
    const on = t === tab;
    t.setAttribute('aria-selected', String(on));
    t.tabIndex = on ? 0 : -1;
    $(t.getAttribute('aria-controls')).hidden = !on;
  }
  tab.focus();
  if (tab === tabs[0]) table.schedule();
}
for (const t of tabs) {
  t.addEventListener('click', () => selectTab(t));
  t.addEventListener('keydown', (e) => {
    if (e.key === 'ArrowRight' || e.key === 'ArrowLeft') selectTab(tabs[(tabs.indexOf(t) + 1) % tabs.length]);
  });
}

// The key form.
$('key-button').addEventListener('click', () => {
  $('key-form').hidden = !$('key-form').hidden;
  if (!$('key-form').hidden) $('key-input').focus();
});
$('key-form').addEventListener('submit', (e) => {
  e.preventDefault();
  state.key = $('key-input').value.trim();
  $('key-input').value = '';
  if (state.key === '') sessionStorage.removeItem(KEY_STORAGE);
  else sessionStorage.setItem(KEY_STORAGE, state.key);
  $('key-error').textContent = '';
  store.reset();
  table.schedule();
  void start();
});
$('key-clear').addEventListener('click', () => {
  state.key = '';
  sessionStorage.removeItem(KEY_STORAGE);
  store.reset();
  table.schedule();
  void start();
});

table.schedule();
void start();
