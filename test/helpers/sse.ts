export interface SseEvent {
  id?: string;
  event: string;
  data: any;
}

/** Reads SSE events from a fetch body until `count` events arrived (comments skipped), then cancels the body. */
export async function readEvents(res: Response, count: number): Promise<SseEvent[]> {
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  const out: SseEvent[] = [];
  while (out.length < count) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let i: number;
    while ((i = buf.indexOf('\n\n')) >= 0 && out.length < count) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      if (block.startsWith(':')) continue;
      const ev: SseEvent = { event: 'message', data: undefined };
      for (const line of block.split('\n')) {
        const [k, ...rest] = line.split(': ');
        const v = rest.join(': ');
        if (k === 'id') ev.id = v;
        else if (k === 'event') ev.event = v;
        else if (k === 'data') ev.data = JSON.parse(v);
      }
      out.push(ev);
    }
  }
  await reader.cancel();
  return out;
}
