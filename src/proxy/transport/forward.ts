/**
 * Opaque forwarding of an authorized inbound connection to the application: one upstream TCP
 * connection, bytes piped both ways. `pipe` gives backpressure (a slow reader pauses the other
 * side) and propagates a half-close (FIN) in each direction, which is why both sockets must be
 * `allowHalfOpen`. A side that closes without finishing both directions (an error, a reset, a
 * destroy) takes the other side down with it, so nothing is left half-open forever.
 */
import { connect, type Socket } from 'node:net';

/** Where the application listens. */
export interface ForwardTarget {
  readonly host: string;
  readonly port: number;
}

/**
 * Connects to `target` and pipes `client` ↔ upstream. `client` must be `allowHalfOpen` and may
 * hold unread bytes (a detected prefix put back): they are forwarded first. `onConnectError` is
 * called (once, before `client` is destroyed) when the upstream connection fails before it is
 * established. Returns the upstream socket.
 */
export function forwardTcp(client: Socket, target: ForwardTarget, onConnectError: (err: Error) => void, clientGate?: Promise<boolean>): Socket {
  const upstream = connect({ host: target.host, port: target.port, allowHalfOpen: true, noDelay: true });
  let connected = false;
  upstream.once('connect', () => {
    connected = true;
  });
  // Before pipeBoth's listener: the caller hears of the failure before `client` is destroyed.
  upstream.on('error', (err) => {
    if (!connected) onConnectError(err);
  });
  pipeBoth(client, upstream, clientGate);
  return upstream;
}

/**
 * Pipes two `allowHalfOpen` sockets both ways (`client` gets `noDelay`): an error or an unclean
 * close of either takes the other down. Used for inbound forwarding and outbound tunnels. With
 * `clientGate`, the client's bytes flow only once it resolves true (the upstream's at once: a
 * server may speak first); false destroys both.
 */
export function pipeBoth(client: Socket, upstream: Socket, clientGate?: Promise<boolean>): void {
  client.on('error', () => upstream.destroy());
  upstream.on('error', () => client.destroy());
  upstream.on('close', () => {
    if (!isCleanlyClosed(upstream)) client.destroy();
  });
  client.on('close', () => {
    if (!isCleanlyClosed(client)) upstream.destroy();
  });
  client.setNoDelay(true);
  if (clientGate === undefined) client.pipe(upstream);
  else {
    void clientGate.then(
      (open) => {
        if (open && !client.destroyed && !upstream.destroyed) client.pipe(upstream);
        else {
          client.destroy();
          upstream.destroy();
        }
      },
      () => {
        client.destroy();
        upstream.destroy();
      },
    );
  }
  upstream.pipe(client);
  // A side already gone would never emit the 'close' that takes the other down.
  if (client.destroyed) upstream.destroy();
  if (upstream.destroyed) client.destroy();
}

/**
 * A socket closed cleanly when it received the peer's FIN and flushed everything written to it:
 * then the pipes have already ended the other side's write direction and it will close by itself
 * once its own peer finishes. Anything else (an error, a destroy) must tear the other side down.
 */
function isCleanlyClosed(s: Socket): boolean {
  return s.readableEnded && s.writableFinished;
}
