/**
 * A TCP proxy for fault injection: tests point a process at it instead of its real peer (e.g.
 * Postgres) and cut or restore the link while the process runs.
 *
 * @module
 */

/** A running proxy. */
export interface TcpProxy {
  /** The local port to connect to. */
  port: number;
  /** Drops every open connection and resets new ones until {@link restore}. */
  cut(): void;
  /** Lets connections through again. */
  restore(): void;
  /** Stops the proxy. */
  close(): Promise<void>;
}

/** Starts a proxy on 127.0.0.1 to `target` (host:port). */
export function startTcpProxy(target: { hostname: string; port: number }): TcpProxy {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const open = new Set<Deno.Conn>();
  let cut = false;
  const close = (c: Deno.Conn) => {
    open.delete(c);
    try {
      c.close();
    } catch { /* already closed */ }
  };
  const pipe = async (from: Deno.Conn, to: Deno.Conn) => {
    try {
      await from.readable.pipeTo(to.writable, { preventClose: false });
    } catch { /* the other side went away */ }
    close(from);
    close(to);
  };
  const accepting = (async () => {
    for await (const client of listener) {
      if (cut) {
        client.close();
        continue;
      }
      open.add(client);
      Deno.connect(target).then((server) => {
        open.add(server);
        pipe(client, server);
        pipe(server, client);
      }, () => close(client));
    }
  })().catch(() => {});
  return {
    port: (listener.addr as Deno.NetAddr).port,
    cut() {
      cut = true;
      for (const c of [...open]) close(c);
    },
    restore() {
      cut = false;
    },
    async close() {
      cut = true;
      for (const c of [...open]) close(c);
      listener.close();
      await accepting;
    },
  };
}
