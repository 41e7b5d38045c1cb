CREATE TABLE `commands` (
	`command_id` text PRIMARY KEY NOT NULL,
	`placement_id` text NOT NULL,
	`type` text NOT NULL,
	`generation` integer NOT NULL,
	`digest` text NOT NULL,
	`received_at_ms` integer NOT NULL
);
--> statement-breakpoint
CREATE TABLE `deliveries` (
	`delivery_id` text PRIMARY KEY NOT NULL,
	`placement_id` text NOT NULL,
	`digest` text NOT NULL
);
--> statement-breakpoint
CREATE TABLE `outbox` (
	`seq` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`update_json` text NOT NULL
);
--> statement-breakpoint
CREATE TABLE `placements` (
	`placement_id` text PRIMARY KEY NOT NULL,
	`allocation_id` text NOT NULL,
	`generation` integer NOT NULL,
	`spec_json` text NOT NULL,
	`dir_name` text NOT NULL,
	`desired` text NOT NULL,
	`observed` text NOT NULL,
	`error_code` text,
	`vm_pid` integer,
	`vm_start_time` integer,
	`lease_expires_at_ms` integer NOT NULL,
	`workload_exit_code` integer,
	`updated_at_ms` integer NOT NULL
);
