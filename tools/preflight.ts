/**
 * What `deno task start` checks before it starts anything, so that a second start, a taken port or
 * a data folder in use is one line instead of a stack trace from deep inside a server or PGlite.
 *
 * @module
 */

/** The problem with the ports (each named by its variable), or undefined if all can be listened on. */
export function portProblem(host: string, ports: Record<string, string>): string | undefined {
  const byPort = new Map<number, string>();
  for (const [name, value] of Object.entries(ports)) {
    const port = Number(value);
    if (!Number.isInteger(port) || port < 1 || port > 65535) {
      return `${name} is "${value}", not a port number (1-65535)`;
    }
    const other = byPort.get(port);
    if (other) return `${other} and ${name} are both ${port}: each needs a port of its own`;
    byPort.set(port, name);
  }
  for (const [port, name] of byPort) {
    try {
      Deno.listen({ hostname: host, port }).close();
    } catch (error) {
      if (error instanceof Deno.errors.AddrInUse) {
        return `port ${port} (${name}) is in use (is another "deno task start" running?)`;
      }
      if (error instanceof Deno.errors.AddrNotAvailable) {
        return `cannot listen on ${host}: not an address of this machine (START_HOST)`;
      }
      return `cannot listen on ${host}:${port} (${name}): ${(error as Error).message}`;
    }
  }
  return undefined;
}

/** A lock held by this process until it releases it or ends. */
export interface Lock {
  /** Releases the lock (its file stays: what counts is the flock on it). */
  release(): void;
}

/**
 * Takes the lock of the folder `dir` (a file `start.lock` in it, locked with flock, so that the
 * lock of a process that was killed is free at once, and holding the holder's pid for the message).
 * Returns the pid of the holder instead when another process holds it (0 if it has not written it
 * yet).
 */
export async function lockFolder(dir: URL): Promise<Lock | { heldBy: number }> {
  const path = new URL("start.lock", dir);
  const file = await Deno.open(path, { read: true, write: true, create: true });
  if (!(await file.tryLock(true))) {
    const text = new TextDecoder().decode(await Deno.readFile(path)).trim();
    file.close();
    return { heldBy: /^\d+$/.test(text) ? Number(text) : 0 };
  }
  await file.truncate(0);
  await file.write(new TextEncoder().encode(`${Deno.pid}\n`));
  return {
    release() {
      file.close();
    },
  };
}
