/** Public surface of `identity`. */
export {};
