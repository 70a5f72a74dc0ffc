// The page's copy of the sandboxes it may see, fed by the watch: upserts and deletes by key, a sorted key
// list for the table, and counts per phase and namespace. Rendering is the table's business; the store
// only says what changed.

function compareKeys(a, b) {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** Index of `key` in the sorted `keys`, or where it would go. */
function lowerBound(keys, key) {
  let lo = 0;
  let hi = keys.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (keys[mid] < key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

export class SandboxStore {
  constructor() {
    this.rows = new Map();
    this.keys = [];
    this.sorted = true;
    this.synced = false;
    this.phaseCounts = new Map();
    this.namespaceCounts = new Map();
    /** Bumped on every change; views compare it to know when to re-filter. */
    this.generation = 0;
    /** Bumped when the set of namespaces changes (the namespace filter's options). */
    this.namespaceGeneration = 0;
  }

  reset() {
    this.rows.clear();
    this.keys = [];
    this.sorted = true;
    this.synced = false;
    this.phaseCounts.clear();
    this.namespaceCounts.clear();
    this.generation++;
    this.namespaceGeneration++;
  }

  markSynced() {
    this.synced = true;
    this.generation++;
  }

  upsert(s) {
    const key = s.namespace + '/' + s.name;
    const prev = this.rows.get(key);
    const gw = s.session === null ? '' : s.session.gatewayId;
    s.key = key;
    s.search = (key + ' ' + s.ids.join(' ') + ' ' + gw + ' ' + s.reason + ' ' + s.driver).toLowerCase();
    this.rows.set(key, s);
    if (prev === undefined) {
      if (this.count(this.namespaceCounts, s.namespace, 1)) this.namespaceGeneration++;
      // While the first full state streams in, keys are appended and sorted once; later inserts go in place.
      if (this.synced && this.sorted) this.keys.splice(lowerBound(this.keys, key), 0, key);
      else {
        this.keys.push(key);
        this.sorted = false;
      }
    } else {
      this.count(this.phaseCounts, prev.phase, -1);
    }
    this.count(this.phaseCounts, s.phase, 1);
    this.generation++;
  }

  delete(namespace, name) {
    const key = namespace + '/' + name;
    const prev = this.rows.get(key);
    if (prev === undefined) return;
    this.rows.delete(key);
    this.count(this.phaseCounts, prev.phase, -1);
    if (this.count(this.namespaceCounts, prev.namespace, -1)) this.namespaceGeneration++;
    const keys = this.ordered();
    const i = lowerBound(keys, key);
    if (keys[i] === key) keys.splice(i, 1);
    this.generation++;
  }

  /** Every key, sorted by namespace then name. */
  ordered() {
    if (!this.sorted) {
      this.keys.sort(compareKeys);
      this.sorted = true;
    }
    return this.keys;
  }

  /** Adds `by` to a count; true when the name appeared or disappeared. */
  count(map, name, by) {
    const n = (map.get(name) ?? 0) + by;
    if (n <= 0) map.delete(name);
    else map.set(name, n);
    return n <= 0 || n === by;
  }
}
