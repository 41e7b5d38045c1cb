CREATE TABLE `run_events` (
	`obj` text NOT NULL,
	`run_id` text NOT NULL,
	`seq` integer NOT NULL,
	`type` text NOT NULL,
	`state` text NOT NULL,
	`at_ms` integer NOT NULL,
	`data_json` text,
	PRIMARY KEY(`obj`, `run_id`, `seq`)
);
--> statement-breakpoint
CREATE TABLE `run_records` (
	`obj` text NOT NULL,
	`run_id` text NOT NULL,
	`seq` integer NOT NULL,
	`tenant` text NOT NULL,
	`client_request_id` text NOT NULL,
	`body_digest` text NOT NULL,
	`workload_class` text NOT NULL,
	`state` text NOT NULL,
	`outcome` text,
	`reason` text,
	`exit_code` integer,
	`allocation_id` text,
	`host_id` text,
	`labels_json` text NOT NULL,
	`budget_ms` integer NOT NULL,
	`script_digest` text NOT NULL,
	`script_base64` text,
	`env_json` text,
	`queued_at_ms` integer NOT NULL,
	`queue_deadline_at_ms` integer NOT NULL,
	`dispatched_at_ms` integer,
	`placed_at_ms` integer,
	`ready_at_ms` integer,
	`running_at_ms` integer,
	`exited_at_ms` integer,
	`ended_at_ms` integer,
	`cleanup_pending` integer NOT NULL,
	`dispatch_error` text,
	PRIMARY KEY(`obj`, `run_id`)
);
--> statement-breakpoint
CREATE INDEX `run_records_tenant` ON `run_records` (`obj`,`tenant`,`seq`);--> statement-breakpoint
CREATE INDEX `run_records_open` ON `run_records` (`obj`,`ended_at_ms`);--> statement-breakpoint
CREATE TABLE `run_tenants` (
	`obj` text NOT NULL,
	`tenant` text NOT NULL,
	`last_dispatch_at_ms` integer NOT NULL,
	PRIMARY KEY(`obj`, `tenant`)
);
