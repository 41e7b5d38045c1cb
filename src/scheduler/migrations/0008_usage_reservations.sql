CREATE TABLE `usage_reservations` (
	`obj` text NOT NULL,
	`allocation_id` text NOT NULL,
	`tenant` text NOT NULL,
	`reserved_micros` integer NOT NULL,
	`at_ms` integer NOT NULL,
	PRIMARY KEY(`obj`, `allocation_id`)
);
--> statement-breakpoint
CREATE INDEX `usage_reservations_tenant` ON `usage_reservations` (`obj`,`tenant`);