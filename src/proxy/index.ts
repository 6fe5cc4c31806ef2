/** Public surface of `proxy`: the sidecar behind `ward proxy`. */
export {};
