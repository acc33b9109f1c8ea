/**
 * The audit trail and change feed every service keeps: events written in the statement of each
 * change (./events.ts; a resource row's create and update, ./rows.ts), followed as they commit
 * (./feed.ts), pruned by age (./retention.ts).
 *
 * @module
 */

export * from "./events.ts";
export * from "./feed.ts";
export * from "./retention.ts";
export * from "./rows.ts";
