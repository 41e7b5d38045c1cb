CREATE TABLE `_alarm` (
	`cls` text NOT NULL,
	`obj` text NOT NULL,
	`at_ms` integer NOT NULL,
	PRIMARY KEY(`cls`, `obj`)
);
--> statement-breakpoint
CREATE INDEX `_alarm_due` ON `_alarm` (`at_ms`);--> statement-breakpoint
CREATE TABLE `_inbox` (
	`seq` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`cls` text NOT NULL,
	`obj` text NOT NULL,
	`message_id` text NOT NULL,
	`body` text NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `_inbox_dedup` ON `_inbox` (`cls`,`obj`,`message_id`);--> statement-breakpoint
CREATE TABLE `_meta` (
	`key` text PRIMARY KEY NOT NULL,
	`value` text NOT NULL
);
--> statement-breakpoint
CREATE TABLE `_outbox` (
	`seq` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`cls` text NOT NULL,
	`obj` text NOT NULL,
	`target_cls` text NOT NULL,
	`target_obj` text NOT NULL,
	`message_id` text NOT NULL,
	`body` text NOT NULL,
	`latest` integer NOT NULL
);
--> statement-breakpoint
CREATE TABLE `_quarantine` (
	`cls` text NOT NULL,
	`obj` text NOT NULL,
	`reason` text NOT NULL,
	`at_ms` integer NOT NULL,
	PRIMARY KEY(`cls`, `obj`)
);
--> statement-breakpoint
CREATE TABLE `allocation_events` (
	`obj` text NOT NULL,
	`seq` integer NOT NULL,
	`event_id` text NOT NULL,
	`type` text NOT NULL,
	`at_ms` integer NOT NULL,
	`generation` integer NOT NULL,
	`placement_id` text,
	`host_id` text,
	`from_state` text,
	`to_state` text,
	`reason` text,
	`data_json` text,
	PRIMARY KEY(`obj`, `seq`)
);
--> statement-breakpoint
CREATE TABLE `allocation` (
	`obj` text PRIMARY KEY NOT NULL,
	`identity` text NOT NULL,
	`client_request_id` text NOT NULL,
	`body_digest` text NOT NULL,
	`workload_class` text NOT NULL,
	`spec_json` text NOT NULL,
	`labels_json` text NOT NULL,
	`state` text NOT NULL,
	`desired` text NOT NULL,
	`generation` integer NOT NULL,
	`attempts` integer NOT NULL,
	`host_id` text,
	`placement_id` text,
	`reservation_key` text,
	`observed_state` text,
	`reason` text,
	`conditions_json` text NOT NULL,
	`tried_hosts_json` text NOT NULL,
	`next_attempt_at_ms` integer NOT NULL,
	`guest_ready` integer NOT NULL,
	`payload_consumed` integer NOT NULL,
	`replace_after_absent` integer NOT NULL,
	`workload_exit_code` integer,
	`created_at_ms` integer NOT NULL,
	`updated_at_ms` integer NOT NULL,
	`state_entered_at_ms` integer NOT NULL,
	`expires_at_ms` integer NOT NULL,
	`replacement_authorized` integer NOT NULL,
	`host_check_at_ms` integer NOT NULL,
	`terminal_at_ms` integer,
	`placement_json` text
);
--> statement-breakpoint
CREATE TABLE `host_commands` (
	`obj` text NOT NULL,
	`command_id` text NOT NULL,
	`placement_id` text NOT NULL,
	`type` text NOT NULL,
	`generation` integer NOT NULL,
	`status` text NOT NULL,
	`created_at_ms` integer NOT NULL,
	PRIMARY KEY(`obj`, `command_id`)
);
--> statement-breakpoint
CREATE INDEX `host_commands_pending` ON `host_commands` (`obj`,`status`,`created_at_ms`);--> statement-breakpoint
CREATE TABLE `host_deliveries` (
	`obj` text NOT NULL,
	`delivery_id` text NOT NULL,
	`placement_id` text NOT NULL,
	`generation` integer NOT NULL,
	`digest` text NOT NULL,
	`consumed_at_ms` integer NOT NULL,
	PRIMARY KEY(`obj`, `delivery_id`)
);
--> statement-breakpoint
CREATE TABLE `host` (
	`obj` text PRIMARY KEY NOT NULL,
	`admin_state` text NOT NULL,
	`credential_digest` text,
	`credential_version` integer NOT NULL,
	`enroll_digest` text NOT NULL,
	`capacity_json` text NOT NULL,
	`reserve_json` text NOT NULL,
	`region` text NOT NULL,
	`architecture` text NOT NULL,
	`labels_json` text NOT NULL,
	`agent_protocol_version` text NOT NULL,
	`vmm_driver` text NOT NULL,
	`heartbeat_at_ms` integer,
	`agent_epoch` text NOT NULL,
	`boot_id` text NOT NULL,
	`last_seq` integer NOT NULL,
	`isolation_healthy` integer NOT NULL,
	`ad_revision` integer NOT NULL,
	`ad_published_at_ms` integer NOT NULL,
	`registered_at_ms` integer NOT NULL,
	`facts_json` text NOT NULL,
	`fenced_at_ms` integer
);
--> statement-breakpoint
CREATE TABLE `host_placements` (
	`obj` text NOT NULL,
	`placement_id` text NOT NULL,
	`allocation_id` text NOT NULL,
	`generation` integer NOT NULL,
	`state` text NOT NULL,
	`resources_json` text NOT NULL,
	`spec_json` text NOT NULL,
	`reservation_key` text NOT NULL,
	`desired` text NOT NULL,
	`lease_expires_at_ms` integer NOT NULL,
	`error_code` text,
	`created_at_ms` integer NOT NULL,
	`updated_at_ms` integer NOT NULL,
	PRIMARY KEY(`obj`, `placement_id`)
);
--> statement-breakpoint
CREATE UNIQUE INDEX `host_placements_key` ON `host_placements` (`obj`,`reservation_key`);--> statement-breakpoint
CREATE TABLE `host_update_seqs` (
	`obj` text NOT NULL,
	`placement_id` text NOT NULL,
	`last_seq` integer NOT NULL,
	PRIMARY KEY(`obj`, `placement_id`)
);
--> statement-breakpoint
CREATE TABLE `directory_ads` (
	`obj` text NOT NULL,
	`host_id` text NOT NULL,
	`revision` integer NOT NULL,
	`ad_json` text NOT NULL,
	`received_at_ms` integer NOT NULL,
	PRIMARY KEY(`obj`, `host_id`)
);
--> statement-breakpoint
CREATE TABLE `directory_waiters` (
	`obj` text NOT NULL,
	`allocation_id` text NOT NULL,
	`created_at_ms` integer NOT NULL,
	`until_ms` integer NOT NULL,
	`request_json` text NOT NULL,
	PRIMARY KEY(`obj`, `allocation_id`)
);
--> statement-breakpoint
CREATE INDEX `directory_waiters_age` ON `directory_waiters` (`obj`,`created_at_ms`);--> statement-breakpoint
CREATE TABLE `admission_allocations` (
	`obj` text NOT NULL,
	`allocation_id` text NOT NULL,
	`identity` text NOT NULL,
	`active` integer NOT NULL,
	`admitted_at_ms` integer NOT NULL,
	PRIMARY KEY(`obj`, `allocation_id`)
);
--> statement-breakpoint
CREATE TABLE `admission_hosts` (
	`obj` text NOT NULL,
	`host_id` text NOT NULL,
	`registered_at_ms` integer NOT NULL,
	`active` integer NOT NULL,
	PRIMARY KEY(`obj`, `host_id`)
);
--> statement-breakpoint
CREATE TABLE `operations_alerts` (
	`seq` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`obj` text NOT NULL,
	`alert_id` text NOT NULL,
	`type` text NOT NULL,
	`subject` text NOT NULL,
	`reason` text NOT NULL,
	`at_ms` integer NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `operations_alerts_id` ON `operations_alerts` (`obj`,`alert_id`);--> statement-breakpoint
CREATE TABLE `allocation_index` (
	`obj` text NOT NULL,
	`allocation_id` text NOT NULL,
	`identity` text NOT NULL,
	`state` text NOT NULL,
	`created_at_ms` integer NOT NULL,
	`view_json` text NOT NULL,
	PRIMARY KEY(`obj`, `allocation_id`)
);
--> statement-breakpoint
CREATE INDEX `allocation_index_identity` ON `allocation_index` (`obj`,`identity`,`allocation_id`);--> statement-breakpoint
CREATE TABLE `enrollment_tokens` (
	`obj` text NOT NULL,
	`token_digest` text NOT NULL,
	`host_id` text NOT NULL,
	`expires_at_ms` integer NOT NULL,
	`used_with` text,
	`created_by` text NOT NULL,
	PRIMARY KEY(`obj`, `token_digest`)
);
