/**
 * The process's own families (the upstream proxy's `process_*` and node's GC pauses), kept apart
 * from the generic cells: a registry has them only when its owner asks.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { MetricsRegistry, type MetricsRegistryOptions, type MetricType, registerReadFamily, renderValue } from './cells.js';
import { registerGcFamily } from './gc.js';

/** A registry with the process families: what a proxy serves on `/metrics`. */
export function processMetricsRegistry(opts: MetricsRegistryOptions = {}): MetricsRegistry {
  const registry = new MetricsRegistry(opts);
  registerProcessMetrics(registry);
  return registry;
}

/** The upstream proxy's `process_*` families (Linux reads /proc; elsewhere CPU, memory and start time only), and GC pauses. */
export function registerProcessMetrics(registry: MetricsRegistry): void {
  const startSeconds = Math.round((Date.now() - process.uptime() * 1000) / 1000);
  const gauge = (name: string, help: string, read: () => number | undefined, type: MetricType = 'gauge') =>
    registerReadFamily(registry, name, help, read, type);
  gauge(
    'process_cpu_seconds_total',
    'Total user and system CPU time spent in seconds.',
    () => {
      const u = process.cpuUsage();
      return (u.user + u.system) / 1e6;
    },
    'counter',
  );
  gauge('process_start_time_seconds', 'Start time of the process since unix epoch in seconds.', () => startSeconds);
  gauge('process_resident_memory_bytes', 'Resident memory size in bytes.', () => process.memoryUsage.rss());
  registerGcFamily(registry, renderValue);
  if (process.platform !== 'linux') return;
  gauge('process_virtual_memory_bytes', 'Virtual memory size in bytes.', () => procStatusKb('VmSize'));
  gauge('process_threads', 'Number of OS threads in the process.', () => procStatusKb('Threads', 1));
  gauge('process_open_fds', 'Number of open file descriptors.', () => tryRead(() => readdirSync('/proc/self/fd').length));
  gauge('process_max_fds', 'Maximum number of open file descriptors.', () =>
    tryRead(() => {
      const m = /^Max open files\s+(\d+)/m.exec(readFileSync('/proc/self/limits', 'utf8'));
      return m === null ? undefined : Number(m[1]);
    }),
  );
}

/** A `/proc/self/status` field, in bytes for `kB` fields (`unit` 1024) or as is. */
function procStatusKb(field: string, unit = 1024): number | undefined {
  return tryRead(() => {
    const m = new RegExp(`^${field}:\\s+(\\d+)`, 'm').exec(readFileSync('/proc/self/status', 'utf8'));
    return m === null ? undefined : Number(m[1]) * unit;
  });
}

function tryRead(read: () => number | undefined): number | undefined {
  try {
    return read();
  } catch {
    return undefined;
  }
}
