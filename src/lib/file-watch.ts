import { watch } from 'node:fs';
import { basename, dirname } from 'node:path';

/**
 * "Watch a file, debounce, reload" in one place (the file driver's sandboxes file, the API key file).
 * The directory is watched, not the file: editors and Kubernetes config maps replace a file (rename or a
 * symlink swap) rather than write it in place, and a watch on the old inode would go quiet. Bursts of
 * events (a write is often several) become one `onChange` after `debounceMs` of quiet. Keeping the last
 * good content when a reload fails is the caller's part: it knows what good means.
 */
export interface FileWatch {
  close(): void;
}

export function watchFile(path: string, debounceMs: number, onChange: () => void, onError: (err: Error) => void): FileWatch {
  let timer: NodeJS.Timeout | undefined;
  const watcher = watch(dirname(path), (_event, file) => {
    if (file !== null && file !== basename(path)) return;
    clearTimeout(timer);
    timer = setTimeout(onChange, debounceMs);
  });
  watcher.on('error', onError);
  return {
    close() {
      clearTimeout(timer);
      watcher.close();
    },
  };
}
