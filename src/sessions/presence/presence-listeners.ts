/**
 * A set of listeners called in registration order. A listener that throws does not stop the others:
 * the errors are returned so the store can report them (a presence change must reach every subscriber,
 * or the view and the relay would disagree about the same sandbox).
 */
export class ListenerSet<A extends unknown[]> {
  private readonly listeners = new Set<(...args: A) => void>();

  /** Adds a listener; returns the function that removes it. */
  add(listener: (...args: A) => void): () => void {
    // Wrapped so the same function added twice is two registrations, removed one at a time.
    const entry = (...args: A): void => listener(...args);
    this.listeners.add(entry);
    return () => {
      this.listeners.delete(entry);
    };
  }

  emit(...args: A): unknown[] {
    const errors: unknown[] = [];
    for (const l of [...this.listeners]) {
      try {
        l(...args);
      } catch (err) {
        errors.push(err);
      }
    }
    return errors;
  }
}
