/** Public surface of `http`: ward's HTTP/1 and HTTP/2, built for relaying. */

export * from './h1/parser.js';
export * from './h1/pool.js';
export * from './h1/server.js';
export * from './h2/connection.js';
export * from './h2/hpack.js';
export * from './h2/message.js';
export * from './node-internals.js';
export * from './socket.js';
