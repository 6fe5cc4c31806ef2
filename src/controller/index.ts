/** Public surface of `controller`. */
export {};
