/** Public surface of `sources`. */
export {};
