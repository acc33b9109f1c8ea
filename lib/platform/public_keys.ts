/**
 * Public keys as JWKs carry them (RFC 7517, RFC 7518 6.2, RFC 8037 2), checked the same wherever
 * one is taken: by the registry, for the client keys it is given (`private_key_jwt`), and by the
 * token service, for the key in a DPoP proof's header. Base64url members are read only in their
 * canonical form (unpadded, unused bits zero), so that one key has one spelling and one RFC 7638
 * thumbprint; a P-256 point must be on the curve, and an Ed25519 point canonical and not of small
 * order: Deno's WebCrypto imports any 32 bytes as an Ed25519 key, node:crypto any point of the
 * curve, the neutral element too, under which it verifies the signature `R = (0, 1), S = 0` of
 * every message. Plain arithmetic, no key import: 0.11 to 0.13 ms for an Ed25519 point here, 0.006 ms for
 * a P-256 one.
 *
 * @module
 */

// ---------------------------------------------------------------------------------------------
// base64url.

const base64urlPattern = /^[A-Za-z0-9_-]*$/;

/** Encodes bytes as unpadded base64url. */
export function base64url(bytes: Uint8Array): string {
  let binary = "";
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
}

/** Decodes canonical unpadded base64url, or returns undefined (padding, stray bits, bad chars). */
export function fromBase64url(text: string): Uint8Array | undefined {
  if (!base64urlPattern.test(text) || text.length % 4 === 1) return undefined;
  const binary = atob(text.replaceAll("-", "+").replaceAll("_", "/"));
  const bytes = Uint8Array.from(binary, (c) => c.charCodeAt(0));
  // Unused bits must be zero: re-encoding gives back the same text only then.
  return base64url(bytes) === text ? bytes : undefined;
}

/** The unsigned big-endian number of bytes. */
export function bigEndian(bytes: Uint8Array): bigint {
  let n = 0n;
  for (const b of bytes) n = (n << 8n) | BigInt(b);
  return n;
}

// ---------------------------------------------------------------------------------------------
// Curve checks.

function mod(a: bigint, m: bigint): bigint {
  const r = a % m;
  return r < 0n ? r + m : r;
}

function modPow(base: bigint, exponent: bigint, m: bigint): bigint {
  let result = 1n;
  let b = mod(base, m);
  let e = exponent;
  while (e > 0n) {
    if (e & 1n) result = (result * b) % m;
    b = (b * b) % m;
    e >>= 1n;
  }
  return result;
}

const p256 = {
  p: 2n ** 256n - 2n ** 224n + 2n ** 192n + 2n ** 96n - 1n,
  b: 0x5ac635d8aa3a93e7b3ebbd55769886bc651d06b0cc53b0f63bce3c3e27d2604bn,
};

/** Whether (x, y) is a point of P-256 (cofactor 1: every point of the curve is in the group). */
export function onP256(x: Uint8Array, y: Uint8Array): boolean {
  const { p, b } = p256;
  const X = bigEndian(x);
  const Y = bigEndian(y);
  if (X >= p || Y >= p) return false;
  return mod(Y * Y, p) === mod(X * X * X - 3n * X + b, p);
}

const ed = (() => {
  const p = 2n ** 255n - 19n;
  const d = mod(-121665n * modPow(121666n, p - 2n, p), p);
  return { p, d, sqrtMinusOne: modPow(2n, (p - 1n) / 4n, p) };
})();

/**
 * Whether the point (x, y) is of small order: multiplied by the cofactor 8 (three doublings on
 * edwards25519, a = -1, in projective coordinates (X : Y : Z), so without an inversion: the EFD's
 * dbl-2008-hwcd, complete here as d is not a square), it is the neutral element (0 : 1).
 */
function smallOrder(x: bigint, y: bigint): boolean {
  const { p } = ed;
  let [X, Y, Z] = [x, y, 1n];
  for (let i = 0; i < 3; i++) {
    const b = (X + Y) ** 2n % p;
    const c = X * X % p;
    const d = Y * Y % p;
    const f = mod(d - c, p); // E + D, with E = aC = -C
    const j = mod(f - 2n * (Z * Z % p), p);
    X = mod(b - c - d, p) * j % p;
    Y = f * mod(-c - d, p) % p;
    Z = f * j % p;
  }
  return X === 0n && Y === Z;
}

/**
 * Whether 32 bytes are the canonical encoding of a point of edwards25519 (RFC 8032 5.1.3) that is
 * not of small order (multiplied by the cofactor 8 it is not the neutral element): a key of small
 * order would let anyone forge signatures that some verifiers accept.
 */
export function validEd25519(bytes: Uint8Array): boolean {
  if (bytes.length !== 32) return false;
  const { p, d, sqrtMinusOne } = ed;
  const le = Uint8Array.from(bytes).reverse();
  const sign = (le[0]! & 0x80) !== 0;
  le[0]! &= 0x7f;
  const y = bigEndian(le);
  if (y >= p) return false; // not canonical
  // x^2 = u / v; RFC 8032 5.1.3's candidate root x = u v^3 (u v^7)^((p - 5) / 8), one power.
  const u = mod(y * y - 1n, p);
  const v = mod(d * y * y + 1n, p);
  const v3 = v * v % p * v % p;
  let x = u * v3 % p * modPow(u * v3 % p * v3 % p * v % p, (p - 5n) / 8n, p) % p;
  const vx2 = v * x % p * x % p;
  if (vx2 !== u) {
    if (vx2 !== mod(-u, p)) return false; // no square root: not on the curve
    x = x * sqrtMinusOne % p;
  }
  if (x === 0n && sign) return false;
  if ((x & 1n) !== (sign ? 1n : 0n)) x = p - x;
  return !smallOrder(x, y);
}
