-- Written by drizzle-kit (the table); the seed row and the triggers are added by hand: drizzle-kit has no triggers.
CREATE TABLE `change_counter` (
	`id` integer PRIMARY KEY NOT NULL,
	`version` integer NOT NULL
);
--> statement-breakpoint
INSERT INTO `change_counter` (`id`, `version`) VALUES (1, 0);
--> statement-breakpoint
CREATE TRIGGER `organizations_inserted` AFTER INSERT ON `organizations` BEGIN UPDATE `change_counter` SET `version` = `version` + 1 WHERE `id` = 1; END;
--> statement-breakpoint
CREATE TRIGGER `organizations_updated` AFTER UPDATE ON `organizations` BEGIN UPDATE `change_counter` SET `version` = `version` + 1 WHERE `id` = 1; END;
--> statement-breakpoint
CREATE TRIGGER `organizations_deleted` AFTER DELETE ON `organizations` BEGIN UPDATE `change_counter` SET `version` = `version` + 1 WHERE `id` = 1; END;
--> statement-breakpoint
CREATE TRIGGER `api_keys_inserted` AFTER INSERT ON `api_keys` BEGIN UPDATE `change_counter` SET `version` = `version` + 1 WHERE `id` = 1; END;
--> statement-breakpoint
CREATE TRIGGER `api_keys_updated` AFTER UPDATE OF `hash`, `organization_id`, `expires_at`, `revoked_at` ON `api_keys` BEGIN UPDATE `change_counter` SET `version` = `version` + 1 WHERE `id` = 1; END;
--> statement-breakpoint
CREATE TRIGGER `api_keys_deleted` AFTER DELETE ON `api_keys` BEGIN UPDATE `change_counter` SET `version` = `version` + 1 WHERE `id` = 1; END;
--> statement-breakpoint
CREATE TRIGGER `usage_resets_inserted` AFTER INSERT ON `usage_resets` BEGIN UPDATE `change_counter` SET `version` = `version` + 1 WHERE `id` = 1; END;
--> statement-breakpoint
CREATE TRIGGER `usage_resets_updated` AFTER UPDATE ON `usage_resets` BEGIN UPDATE `change_counter` SET `version` = `version` + 1 WHERE `id` = 1; END;
--> statement-breakpoint
CREATE TRIGGER `usage_resets_deleted` AFTER DELETE ON `usage_resets` BEGIN UPDATE `change_counter` SET `version` = `version` + 1 WHERE `id` = 1; END;
