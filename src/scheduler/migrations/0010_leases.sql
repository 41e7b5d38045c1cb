CREATE TABLE `lease_events` (
	`obj` text NOT NULL,
	`lease_id` text NOT NULL,
	`seq` integer NOT NULL,
	`type` text NOT NULL,
	`at_ms` integer NOT NULL,
	`data_json` text,
	PRIMARY KEY(`obj`, `lease_id`, `seq`)
);
--> statement-breakpoint
CREATE TABLE `lease_records` (
	`obj` text NOT NULL,
	`lease_id` text NOT NULL,
	`seq` integer NOT NULL,
	`owner` text NOT NULL,
	`client_request_id` text NOT NULL,
	`body_digest` text NOT NULL,
	`workload_class` text NOT NULL,
	`allocation_id` text NOT NULL,
	`labels_json` text NOT NULL,
	`state` text NOT NULL,
	`reason` text,
	`created_at_ms` integer NOT NULL,
	`expires_at_ms` integer NOT NULL,
	`vm_expires_at_ms` integer NOT NULL,
	`idle_ms` integer,
	`last_activity_at_ms` integer NOT NULL,
	`warned_for_ms` integer,
	`ended_at_ms` integer,
	`shares_json` text NOT NULL,
	PRIMARY KEY(`obj`, `lease_id`)
);
--> statement-breakpoint
CREATE INDEX `lease_records_open` ON `lease_records` (`obj`,`ended_at_ms`);