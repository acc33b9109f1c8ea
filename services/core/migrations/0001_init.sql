-- The core area's tables. Every row carries its space; ids are UUIDv7, so id order is creation
-- order and lists are keyset scans.

create table core.roles (
  id uuid primary key,
  space text not null,
  name text not null,
  description text,
  resource_type text not null,
  permissions text[] not null default '{}',
  created_at timestamptz(3) not null default now(),
  updated_at timestamptz(3) not null default now(),
  unique (space, resource_type, name)
);
create index roles_space_id on core.roles (space, id);
create index roles_space_resource_type_id on core.roles (space, resource_type, id);

create table core.journeys (
  id uuid primary key,
  space text not null,
  owner text not null,
  -- No cascade: a journey with children cannot be deleted (FAILED_PRECONDITION).
  parent_id uuid references core.journeys (id),
  name text not null,
  description text not null default '',
  active boolean not null default true,
  created_at timestamptz(3) not null default now(),
  updated_at timestamptz(3) not null default now(),
  check (parent_id <> id)
);
create index journeys_space_id on core.journeys (space, id);
create index journeys_parent_id_id on core.journeys (parent_id, id);

create table core.units (
  id uuid primary key,
  space text not null,
  -- No cascade: a journey with units cannot be deleted (FAILED_PRECONDITION).
  journey_id uuid not null references core.journeys (id),
  originator text not null,
  title text not null,
  assignee text,
  status text not null check (status in ('todo', 'in_progress', 'done', 'canceled')),
  priority text not null check (priority in ('none', 'low', 'medium', 'high', 'urgent')),
  description text,
  due_at timestamptz(3),
  created_at timestamptz(3) not null default now(),
  updated_at timestamptz(3) not null default now()
);
create index units_journey_id_id on core.units (journey_id, id);

-- Ids of deleted records, so that a page cursor naming one stays valid. `list_key` names the list
-- the record was in: the space for roles and journeys, the journey id for units.
create table core.tombstones (
  id uuid primary key,
  kind text not null check (kind in ('role', 'journey', 'unit')),
  space text not null,
  list_key text not null,
  deleted_at timestamptz(3) not null default now()
);
