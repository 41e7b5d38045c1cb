CREATE TABLE `host_connection_commands` (
	`obj` text NOT NULL,
	`command_id` text NOT NULL,
	`grant_id` text NOT NULL,
	`action` text NOT NULL,
	`network_id` text NOT NULL,
	`allocation_id` text NOT NULL,
	`placement_id` text NOT NULL,
	`generation` integer NOT NULL,
	`connection_id` text NOT NULL,
	`grant_json` text,
	`relay_map_json` text,
	`expires_at_ms` integer NOT NULL,
	`status` text NOT NULL,
	`created_at_ms` integer NOT NULL,
	PRIMARY KEY(`obj`, `command_id`)
);
--> statement-breakpoint
CREATE INDEX `host_connection_commands_pending` ON `host_connection_commands` (`obj`,`status`,`created_at_ms`);--> statement-breakpoint
CREATE TABLE `host_connectivity` (
	`obj` text PRIMARY KEY NOT NULL,
	`public_key` text NOT NULL,
	`candidates_json` text NOT NULL,
	`agent_epoch` text NOT NULL,
	`seq` integer NOT NULL,
	`updated_at_ms` integer NOT NULL
);
--> statement-breakpoint
CREATE TABLE `connection_messages` (
	`obj` text NOT NULL,
	`role` text NOT NULL,
	`seq` integer NOT NULL,
	`body_json` text NOT NULL,
	PRIMARY KEY(`obj`, `role`, `seq`)
);
--> statement-breakpoint
CREATE TABLE `connection` (
	`obj` text PRIMARY KEY NOT NULL,
	`grant_id` text NOT NULL,
	`expires_at_ms` integer NOT NULL,
	`client_token_digest` text NOT NULL,
	`host_token_digest` text NOT NULL,
	`client_last_seq` integer NOT NULL,
	`host_last_seq` integer NOT NULL
);
--> statement-breakpoint
CREATE TABLE `network_allocations` (
	`obj` text NOT NULL,
	`allocation_id` text NOT NULL,
	`address` text NOT NULL,
	`closed_generation` integer NOT NULL,
	`waiting_generation` integer NOT NULL,
	`terminal_at_ms` integer,
	PRIMARY KEY(`obj`, `allocation_id`)
);
--> statement-breakpoint
CREATE UNIQUE INDEX `network_allocations_address` ON `network_allocations` (`obj`,`address`);--> statement-breakpoint
CREATE TABLE `network_directory` (
	`obj` text NOT NULL,
	`network_id` text NOT NULL,
	`tenant` text NOT NULL,
	`subnet` integer NOT NULL,
	`created_at_ms` integer NOT NULL,
	PRIMARY KEY(`obj`, `network_id`)
);
--> statement-breakpoint
CREATE UNIQUE INDEX `network_directory_subnet` ON `network_directory` (`obj`,`subnet`);--> statement-breakpoint
CREATE TABLE `network_free_addresses` (
	`obj` text NOT NULL,
	`kind` text NOT NULL,
	`address` text NOT NULL,
	`freed_at_ms` integer NOT NULL,
	PRIMARY KEY(`obj`, `address`)
);
--> statement-breakpoint
CREATE INDEX `network_free_addresses_kind` ON `network_free_addresses` (`obj`,`kind`,`freed_at_ms`);--> statement-breakpoint
CREATE TABLE `network_grants` (
	`obj` text NOT NULL,
	`grant_id` text NOT NULL,
	`allocation_id` text NOT NULL,
	`generation` integer NOT NULL,
	`host_id` text NOT NULL,
	`placement_id` text NOT NULL,
	`client_address` text NOT NULL,
	`connection_id` text NOT NULL,
	`issued_at_ms` integer NOT NULL,
	`expires_at_ms` integer NOT NULL,
	`revoked_at_ms` integer,
	`revoke_observed_at_ms` integer,
	`gone_at_ms` integer,
	PRIMARY KEY(`obj`, `grant_id`)
);
--> statement-breakpoint
CREATE INDEX `network_grants_allocation` ON `network_grants` (`obj`,`allocation_id`,`generation`);--> statement-breakpoint
CREATE TABLE `network` (
	`obj` text PRIMARY KEY NOT NULL,
	`tenant` text NOT NULL,
	`subnet` integer NOT NULL,
	`last_allocation_index` integer NOT NULL,
	`last_client_index` integer NOT NULL,
	`created_at_ms` integer NOT NULL
);
--> statement-breakpoint
ALTER TABLE `allocation` ADD `network_id` text;--> statement-breakpoint
ALTER TABLE `allocation` ADD `address` text;--> statement-breakpoint
ALTER TABLE `allocation` ADD `grant_generation` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `allocation` ADD `connections_fenced_generation` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `allocation` ADD `pending_replacement` text;