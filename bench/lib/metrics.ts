/** The sum of every sample of `name` in the gateway's /metrics whose labels include all of `labels`. */
export async function metricValue(adminUrl: string, name: string, labels: Readonly<Record<string, string>> = {}): Promise<number> {
  const res = await fetch(adminUrl + '/metrics', { signal: AbortSignal.timeout(10_000) });
  const text = await res.text();
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const rest = line.slice(name.length);
    if (rest[0] !== '{' && rest[0] !== ' ') continue;
    const close = rest.indexOf('}');
    const labelText = rest[0] === '{' ? rest.slice(1, close) : '';
    if (!Object.entries(labels).every(([k, v]) => labelText.includes(`${k}="${v}"`))) continue;
    sum += Number(rest.slice(rest[0] === '{' ? close + 1 : 0).trim().split(' ')[0]);
  }
  return sum;
}
