// "Open in browser": mints a signed link for one port of the open sandbox through the operator API
// (POST /v1/sandboxes/{ns}/{name}/links, with this console's key, so a team key mints only for its own
// namespaces) and opens it in a new tab. The tab gets no opener and no Referer: it cannot reach back into
// this page, which holds the key. A refusal is shown with its typed code, as the API gave it.

/** Mints a link: `{ok: true, url, expiresAt}`, or `{ok: false, code, message}` with the API's typed error. */
export async function mintLink({ namespace, name, port, websocket }, headers) {
  const path = `/v1/sandboxes/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}/links`;
  let res;
  try {
    res = await fetch(path, { method: 'POST', headers: { ...headers, 'content-type': 'application/json' }, body: JSON.stringify({ port, websocket }), cache: 'no-store' });
  } catch (err) {
    return { ok: false, code: 'unreachable', message: `the gateway cannot be reached (${err.message})` };
  }
  const body = await res.json().catch(() => ({}));
  if (res.status === 201 && typeof body.url === 'string') return { ok: true, url: body.url, expiresAt: body.expiresAt };
  return { ok: false, code: body.code ?? `http_${res.status}`, message: body.message ?? `HTTP ${res.status}` };
}

/** Opens `url` in a new tab, without an opener or a Referer. */
function openTab(url) {
  const a = document.createElement('a');
  a.href = url;
  a.target = '_blank';
  a.rel = 'noopener noreferrer';
  a.click();
}

/**
 * The form for sandbox `s`: a port (the first allowed port by default, else typed in), whether the link
 * allows WebSockets, and the button. `headers()` gives the key header at the time of the click.
 */
export function openLinkForm(s, headers) {
  const form = document.createElement('form');
  form.className = 'open-link';
  form.setAttribute('aria-label', 'Open in browser');
  const port = document.createElement('input');
  port.type = 'number';
  port.min = '1';
  port.max = '65535';
  port.required = true;
  port.name = 'port';
  port.placeholder = 'port';
  if (Array.isArray(s.ports) && s.ports.length > 0) port.value = String(s.ports[0]);
  const portLabel = document.createElement('label');
  portLabel.append('Port ', port);
  const ws = document.createElement('input');
  ws.type = 'checkbox';
  ws.name = 'websocket';
  ws.checked = true;
  const wsLabel = document.createElement('label');
  wsLabel.append(ws, ' WebSockets');
  const button = document.createElement('button');
  button.type = 'submit';
  button.textContent = 'Open in browser';
  const status = document.createElement('span');
  status.className = 'link-status';
  status.setAttribute('role', 'status');
  form.append(portLabel, wsLabel, button, status);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    button.disabled = true;
    status.className = 'link-status';
    status.textContent = 'Minting a link…';
    const r = await mintLink({ namespace: s.namespace, name: s.name, port: Number(port.value), websocket: ws.checked }, headers());
    button.disabled = false;
    if (!r.ok) {
      status.className = 'link-status key-error';
      status.setAttribute('role', 'alert');
      status.textContent = `${r.code}: ${r.message}`;
      return;
    }
    status.setAttribute('role', 'status');
    status.textContent = `Opened in a new tab; the link expires at ${new Date(r.expiresAt).toLocaleTimeString()}. `;
    const again = document.createElement('a');
    again.href = r.url;
    again.target = '_blank';
    again.rel = 'noopener noreferrer';
    again.textContent = 'Open again';
    status.append(again);
    openTab(r.url);
  });
  return form;
}
