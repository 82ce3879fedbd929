// Bun listens with an accept queue of 512 connections whatever `backlog` asks for (1.4.5: Bun.serve and node:http
// alike). When more clients than that connect at once while the event loop is busy (agents reconnecting after a
// restart, a burst of streams), the kernel drops each completed handshake that finds the queue full, and that client
// waits for the SYN-ACK retransmit, a second later (bench/HISTORY.md, "The TTFT p99 is decided by the accept queue").
// Linux lets listen() be called again on a listening socket to change its queue, so this does that through libc.
import { readdirSync, readFileSync, readlinkSync } from "node:fs";

/** The queue asked for; the kernel caps it at net.core.somaxconn (4096 by default since Linux 5.4). */
export const listenBacklog = 4096;
/** The queue Bun listens with. */
const bunBacklog = 512;

/** The inodes of this machine's TCP sockets listening on `port`, from /proc/net/tcp and tcp6. */
function listeningInodes(port: number): Set<string> {
  const inodes = new Set<string>();
  for (const table of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    let text: string;
    try {
      text = readFileSync(table, "utf8");
    } catch {
      continue;
    }
    for (const line of text.split("\n").slice(1)) {
      const fields = line.trim().split(/\s+/);
      // local_address is ADDRESS:PORT in hex; state 0A is LISTEN; the inode is the tenth field.
      if (fields.length < 10 || fields[3] !== "0A") continue;
      if (Number.parseInt(fields[1]?.split(":")[1] ?? "", 16) === port) inodes.add(fields[9] as string);
    }
  }
  return inodes;
}

/** This process's file descriptors of the sockets listening on `port`. */
function listeningDescriptors(port: number): number[] {
  const inodes = listeningInodes(port);
  const descriptors: number[] = [];
  for (const entry of readdirSync("/proc/self/fd")) {
    try {
      const inode = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/self/fd/${entry}`))?.[1];
      if (inode !== undefined && inodes.has(inode)) descriptors.push(Number(entry));
    } catch {
      // closed meanwhile
    }
  }
  return descriptors;
}

/**
 * The machine's count of connections that completed a handshake while their listener's accept queue was full
 * (TcpExt ListenOverflows in /proc/net/netstat): each waits for the SYN-ACK retransmit. The benchmarks and the tests
 * read it around a burst.
 */
export function listenOverflows(): number {
  const rows = readFileSync("/proc/net/netstat", "utf8")
    .split("\n")
    .filter((line) => line.startsWith("TcpExt:"));
  const names = rows[0]?.split(" ") ?? [];
  return Number(rows[1]?.split(" ")[names.indexOf("ListenOverflows")] ?? Number.NaN);
}

/** The kernel's cap on any listen queue. */
function maximumBacklog(): number {
  try {
    return Number(readFileSync("/proc/sys/net/core/somaxconn", "utf8").trim()) || bunBacklog;
  } catch {
    return bunBacklog;
  }
}

/**
 * Raises the accept queue of this process's sockets listening on `port` to `backlog` (the kernel caps it at
 * somaxconn), and returns the queue they now have. Linux only; anywhere it cannot (another system, no libc to
 * load), the queue stays Bun's 512, which is what it returns.
 */
export async function raiseListenBacklog(port: number, backlog = listenBacklog): Promise<number> {
  if (process.platform !== "linux") return bunBacklog;
  try {
    const { dlopen, FFIType } = await import("bun:ffi");
    const libc = dlopen("libc.so.6", { listen: { args: [FFIType.i32, FFIType.i32], returns: FFIType.i32 } });
    try {
      const descriptors = listeningDescriptors(port);
      let raised = 0;
      for (const descriptor of descriptors) if (libc.symbols.listen(descriptor, backlog) === 0) raised++;
      return descriptors.length > 0 && raised === descriptors.length ? Math.min(backlog, maximumBacklog()) : bunBacklog;
    } finally {
      libc.close();
    }
  } catch {
    return bunBacklog;
  }
}
