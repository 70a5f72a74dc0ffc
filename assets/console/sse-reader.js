// Server-Sent Events over fetch(): EventSource cannot send an API key header, and a key in the URL would
// land in access logs. Parses the WHATWG "event stream" format (fields event, data, id; comments; CR, LF
// or CRLF line ends) and reconnects after a dropped stream with Last-Event-ID, so the watch resumes from
// the last change it delivered.

const QUIET_MS = 45_000; // the watch pings every 15 s: three missed pings mean the connection is dead
const LINE_END = /\r\n|\r|\n/g;

/**
 * Follows `url` until `stop()`. `onEvent(type, data, id)` gets each event (data is the joined data lines);
 * `onState(state, detail)` gets 'live', 'reconnecting' (with the error) or 'unauthorized' (with the
 * status and the JSON body; the reader then stops, the caller asks for a key).
 */
export function followEvents({ url, headers, onEvent, onState }) {
  let stopped = false;
  let lastEventId;
  let current;
  let wasLive = false;

  async function once() {
    const controller = new AbortController();
    current = controller;
    let quiet = setTimeout(() => controller.abort(new Error('no data from the watch for 45 s')), QUIET_MS);
    const h = { accept: 'text/event-stream', ...headers() };
    if (lastEventId !== undefined) h['last-event-id'] = lastEventId;
    try {
      const res = await fetch(url, { headers: h, signal: controller.signal, cache: 'no-store' });
      if (res.status === 401 || res.status === 403) {
        let body = {};
        try {
          body = await res.json();
        } catch {
          // a proxy's non-JSON answer: the status says enough
        }
        return { unauthorized: { status: res.status, body } };
      }
      if (!res.ok || res.body === null) throw new Error(`the watch answered HTTP ${res.status}`);
      onState('live');
      wasLive = true;
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = '';
      let type = '';
      let data = [];
      let id;
      let afterCR = false;
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        clearTimeout(quiet);
        quiet = setTimeout(() => controller.abort(new Error('no data from the watch for 45 s')), QUIET_MS);
        buf += value;
        let start = 0;
        // A CR that ended the previous chunk ended a line; an LF right after it is the rest of a CRLF.
        if (afterCR && buf[0] === '\n') start = 1;
        afterCR = false;
        for (;;) {
          LINE_END.lastIndex = start;
          const m = LINE_END.exec(buf);
          if (m === null) break;
          const end = m.index;
          const line = buf.slice(start, end);
          start = end + m[0].length;
          if (m[0] === '\r' && start === buf.length) afterCR = true;
          if (line === '') {
            if (id !== undefined) lastEventId = id;
            if (data.length > 0) onEvent(type === '' ? 'message' : type, data.join('\n'), lastEventId);
            type = '';
            data = [];
            id = undefined;
            continue;
          }
          if (line[0] === ':') continue;
          const colon = line.indexOf(':');
          const field = colon < 0 ? line : line.slice(0, colon);
          let v = colon < 0 ? '' : line.slice(colon + 1);
          if (v[0] === ' ') v = v.slice(1);
          if (field === 'event') type = v;
          else if (field === 'data') data.push(v);
          else if (field === 'id' && !v.includes('\0')) id = v;
        }
        buf = buf.slice(start);
      }
      throw new Error('the watch ended');
    } finally {
      clearTimeout(quiet);
    }
  }

  (async () => {
    let backoff = 250;
    while (!stopped) {
      try {
        const r = await once();
        if (r !== undefined && r.unauthorized !== undefined) {
          onState('unauthorized', r.unauthorized);
          return;
        }
      } catch (err) {
        if (stopped) return;
        if (wasLive) backoff = 250;
        wasLive = false;
        onState('reconnecting', err);
        await new Promise((resolve) => setTimeout(resolve, backoff));
        backoff = Math.min(backoff * 2, 10_000);
      }
    }
  })();

  return {
    stop() {
      stopped = true;
      current?.abort();
    },
  };
}
