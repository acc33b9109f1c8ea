/**
 * A client's address as one key of the limits that count per address (the device page's guessing
 * limit, the gateway's limit on requests that store something): an IPv4 address as it is (an
 * IPv4-mapped IPv6 one as its IPv4 address), an IPv6 address as its /64, the least any host is
 * given (RFC 6177), so that the 2^64 addresses of one network are one address to a limit; anything
 * else as given.
 *
 * @module
 */

/** The key a limit counts `address` under (see the module's description). */
export function addressKey(address: string): string {
  let host: string;
  try {
    // The URL parser checks an IPv6 address and writes it one way (RFC 5952: lower case, zeros
    // compressed, an IPv4 tail as two groups); anything else, an IPv4 address included, throws.
    const bare = address.replace(/^\[(.*)\]$/, "$1").replace(/%.*$/, "");
    host = new URL(`http://[${bare}]`).hostname.slice(1, -1);
  } catch {
    return address;
  }
  const [head, tail] = host.split("::").map((half) =>
    half === "" ? [] : half.split(":").map((g) => parseInt(g, 16))
  );
  const n = [
    ...head!,
    ...Array<number>(8 - head!.length - (tail?.length ?? 0)).fill(0),
    ...tail ?? [],
  ];
  if (n.slice(0, 5).every((g) => g === 0) && n[5] === 0xffff) {
    return [n[6]! >> 8, n[6]! & 255, n[7]! >> 8, n[7]! & 255].join(".");
  }
  return `${n.slice(0, 4).map((g) => g.toString(16)).join(":")}::/64`;
}
