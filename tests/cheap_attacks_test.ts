/**
 * Cheap attacks (lib/testing/cheap_attacks.ts), one after another against the real processes on
 * Postgres, while normal requests go on through the gateway and over gRPC: streams that never
 * finish, answers nobody reads, a budget held by declared lengths and by half-sent heads and
 * bodies, HPACK inflation, control frames nobody reads, bodies of one-byte chunks, and thousands of
 * idle connections. During each, every process keeps its PID and stays under its Deployment's 256
 * MiB, and at least 90% of the normal requests succeed; right after each, all of them do.
 *
 * The sizes are what the review that found these used, or close; `ATTACK_SCALE` multiplies the
 * counts and the times (a soak: `ATTACK_SCALE=5 deno task test tests/cheap_attacks_test.ts`).
 * Each step prints its figures.
 *
 * @module
 */

import assert from "node:assert/strict";
import { OAuthRegistryService } from "../gen/registry/oauth/v1/oauth_registry_service_pb.ts";
import {
  type AttackResult,
  type AttackSpec,
  cheapAttack,
  grpcTestClient,
  httpClient,
  keepProbing,
  type RssPeak,
  type Stack,
  startStack,
  watchRss,
} from "../lib/testing/mod.ts";

const scale = Number(Deno.env.get("ATTACK_SCALE") ?? 1);
/** The Deployments' memory limit. */
const limitMiB = 256;
/** The share of normal requests that must succeed during an attack. */
const minSuccess = 0.9;

function say(text: string): void {
  // deno-lint-ignore no-console
  console.log(text);
}

function hostPort(url: string): string {
  return new URL(url.includes("://") ? url : `http://${url}`).host;
}

Deno.test({
  name: "cheap attacks in sequence: no process dies or passes 256 MiB, normal requests go on",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn(t) {
    const stack: Stack = await startStack({ env: { LOG_LEVEL: "warn" } });
    const exited: string[] = [];
    for (const [name, proc] of Object.entries(stack.procs)) {
      proc.child.status.then(() => exited.push(name));
    }
    const pids = {
      gateway: stack.procs.gateway.child.pid,
      oauth: stack.procs.oauth.child.pid,
      core: stack.procs.core.child.pid,
      token: stack.procs.token.child.pid,
    };
    const grpc = grpcTestClient(stack.oauthGrpc);
    try {
      const token = await stack.token({ sub: "normal", projects: ["p"], space: "s" });
      const attackerToken = await stack.token({ sub: "attacker", projects: ["q"], space: "s" });
      const api = httpClient(stack.gatewayUrl);
      await api("PATCH", "/v1/projects/p/config", { token, json: { application_name: "P" } });
      const created = await api("POST", "/v1/projects/p/clients", {
        token,
        json: { name: "target", type: "web" },
      });
      assert.equal(created.status, 201);
      const clientId = created.body.id as string;
      const auth = { authorization: `Bearer ${token}` };

      /** One normal request of each kind: through the gateway, and over gRPC. */
      const viaGateway = async () => {
        const res = await fetch(`${stack.gatewayUrl}/v1/projects/p/clients/${clientId}`, {
          headers: auth,
          signal: AbortSignal.timeout(10_000),
        });
        await res.body?.cancel();
        return res.status === 200;
      };
      const viaGrpc = async () => {
        const got = await grpc.call(
          OAuthRegistryService.method.getClient,
          { projectId: "p", clientId },
          auth,
        );
        return got.client?.id === clientId;
      };

      /** Runs an attack while normal requests go on; checks what the module's header says. */
      const under = async (what: string, spec: AttackSpec, check?: (r: AttackResult) => void) => {
        const rss = watchRss(pids);
        const http = keepProbing(viaGateway, 100);
        const rpc = keepProbing(viaGrpc, 100);
        const result = await cheapAttack(spec);
        const [probeHttp, probeRpc] = [await http.stop(), await rpc.stop()];
        const peaks: Record<string, RssPeak> = rss.stop();
        say(
          `${what}: ${JSON.stringify(result)}; normal requests: gateway ${probeHttp.ok} ok / ` +
            `${probeHttp.failed} failed, gRPC ${probeRpc.ok} ok / ${probeRpc.failed} failed; ` +
            `peak RSS MiB: ${
              Object.entries(peaks).map(([n, p]) => `${n} ${p.sampledMiB}`).join(", ")
            }`,
        );
        assert.deepEqual(exited, [], `${what}: a process exited`);
        for (const [name, pid] of Object.entries(pids)) {
          assert.equal(stack.procs[name as keyof typeof stack.procs].child.pid, pid);
        }
        for (const [name, peak] of Object.entries(peaks)) {
          assert.ok(
            peak.sampledMiB <= limitMiB,
            `${what}: ${name} reached ${peak.sampledMiB} MiB (limit ${limitMiB})`,
          );
        }
        for (const [kind, probe] of [["gateway", probeHttp], ["gRPC", probeRpc]] as const) {
          const total = probe.ok + probe.failed;
          assert.ok(total > 0, `${what}: no normal ${kind} request was made`);
          assert.ok(
            probe.ok / total >= minSuccess,
            `${what}: ${probe.failed} of ${total} normal ${kind} requests failed`,
          );
        }
        // Once the attack has stopped, every normal request succeeds.
        for (let i = 0; i < 10; i++) {
          assert.ok(await viaGateway(), `${what}: a gateway request failed after the attack`);
          assert.ok(await viaGrpc(), `${what}: a gRPC call failed after the attack`);
        }
        check?.(result);
      };

      const n = (count: number) => Math.ceil(count * scale);
      const s = (seconds: number) => seconds * scale;
      const grpcTarget = hostPort(stack.oauthGrpc);
      const gatewayTarget = hostPort(stack.gatewayUrl);
      const getClient = `/${OAuthRegistryService.typeName}/GetClient`;

      await t.step("streams that never finish: 150 connections x 100 open streams", async () => {
        await under("open streams", {
          shape: "open-streams",
          target: grpcTarget,
          count: n(150),
          seconds: s(6),
        });
      });

      await t.step(
        "answers nobody reads: zero stream windows, calls opened all along",
        async () => {
          await under("unread answers", {
            shape: "unread-answers",
            target: grpcTarget,
            count: n(20),
            seconds: s(8),
          });
        },
      );

      await t.step(
        "a budget held by two declared lengths, 4 and 2 MiB, on one connection",
        async () => {
          const ready = keepProbing(async () => {
            const res = await fetch(`${stack.gatewayUrl}/readyz`);
            await res.body?.cancel();
            return res.status === 200;
          }, 200);
          await under("declared gRPC lengths", {
            shape: "budget-prefix",
            target: grpcTarget,
            count: 1,
            seconds: s(8),
            path: getClient,
          });
          const readyz = await ready.stop();
          assert.equal(readyz.failed, 0, `/readyz failed ${readyz.failed} times`);
        },
      );

      await t.step("a budget held by 400 half-sent 63 KiB request heads", async () => {
        await under("half-sent heads", {
          shape: "gateway-heads",
          target: gatewayTarget,
          count: n(400),
          seconds: s(6),
        });
      });

      await t.step("a budget held by 18 POSTs that declare 1 MiB and send nothing", async () => {
        await under("declared bodies", {
          shape: "gateway-declared",
          target: gatewayTarget,
          count: n(18),
          seconds: s(6),
          path: "/v1/projects/q/clients",
          token: attackerToken,
        });
      });

      await t.step("HPACK inflation: 1,024 header blocks of a ~64 KiB Huffman value", async () => {
        await under("HPACK", {
          shape: "hpack",
          target: grpcTarget,
          count: n(1024),
          seconds: 2,
        });
      });

      await t.step("PING and SETTINGS floods from 24 connections that never read", async () => {
        await under("control frames", {
          shape: "control-flood",
          target: grpcTarget,
          count: n(24),
          seconds: s(8),
        });
      });

      await t.step("a body of 500,000 one-byte chunks", async () => {
        await under("one-byte chunks", {
          shape: "chunks",
          target: gatewayTarget,
          count: n(500),
          seconds: s(30),
          path: "/v1/projects/q/clients",
          token: attackerToken,
        }, (result) => {
          assert.deepEqual(Object.keys(result.answers), ["411"], JSON.stringify(result.answers));
        });
      });

      await t.step("5,000 connections that never send a byte", async () => {
        await under("idle connections", {
          shape: "idle",
          target: gatewayTarget,
          count: n(5000),
          seconds: s(8),
        });
      });

      const rest = watchRss(pids).stop();
      say(
        `RSS after the attacks, MiB (now / VmHWM): ${
          Object.entries(rest).map(([n, p]) => `${n} ${p.sampledMiB} / ${p.hwmMiB}`).join(", ")
        }`,
      );
      assert.deepEqual(exited, []);
    } finally {
      grpc.close();
      await stack.stop();
    }
  },
});
