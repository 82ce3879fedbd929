CREATE TABLE `usage_minutes` (
	`organization_id` text NOT NULL,
	`minute` integer NOT NULL,
	`tokens` integer NOT NULL,
	`last_time` integer NOT NULL,
	PRIMARY KEY(`organization_id`, `minute`)
);
--> statement-breakpoint
CREATE INDEX `usage_minutes_minute_idx` ON `usage_minutes` (`minute`);--> statement-breakpoint
CREATE TABLE `usage_months` (
	`organization_id` text NOT NULL,
	`month` integer NOT NULL,
	`tokens` integer NOT NULL,
	PRIMARY KEY(`organization_id`, `month`)
);
--> statement-breakpoint
INSERT INTO `usage_minutes` (`organization_id`, `minute`, `tokens`, `last_time`)
SELECT l.`organization_id`, l.`ended_at` / 60000, sum(l.`prompt_tokens` + l.`completion_tokens`), max(l.`ended_at`)
FROM `usage_ledger` l LEFT JOIN `usage_resets` r ON r.`organization_id` = l.`organization_id`
WHERE r.`reset_at` IS NULL OR l.`ended_at` > r.`reset_at`
GROUP BY l.`organization_id`, l.`ended_at` / 60000;
--> statement-breakpoint
INSERT INTO `usage_months` (`organization_id`, `month`, `tokens`)
SELECT l.`organization_id`,
       CAST(strftime('%Y', l.`ended_at` / 1000, 'unixepoch') AS INTEGER) * 12 + CAST(strftime('%m', l.`ended_at` / 1000, 'unixepoch') AS INTEGER) - 1,
       sum(l.`prompt_tokens` + l.`completion_tokens`)
FROM `usage_ledger` l LEFT JOIN `usage_resets` r ON r.`organization_id` = l.`organization_id`
WHERE r.`reset_at` IS NULL OR l.`ended_at` > r.`reset_at`
GROUP BY 1, 2;
