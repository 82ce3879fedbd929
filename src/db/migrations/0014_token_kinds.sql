ALTER TABLE `usage_hours` ADD `prompt_tokens` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `usage_hours` ADD `completion_tokens` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `usage_hours` ADD `cached_tokens` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `usage_key_months` ADD `prompt_tokens` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `usage_key_months` ADD `completion_tokens` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `usage_key_months` ADD `cached_tokens` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `usage_ledger` ADD `cached_tokens` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `usage_ledger_inbox` ADD `cached_tokens` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
UPDATE `usage_hours` SET `prompt_tokens` = ledger.`prompt`, `completion_tokens` = ledger.`completion`
FROM (SELECT `organization_id`, `ended_at` / 3600000 AS `hour`, `key_id`, `model`, sum(`prompt_tokens`) AS `prompt`, sum(`completion_tokens`) AS `completion`
      FROM `usage_ledger` WHERE `prompt_tokens` + `completion_tokens` > 0 GROUP BY 1, 2, 3, 4) AS ledger
WHERE `usage_hours`.`organization_id` = ledger.`organization_id` AND `usage_hours`.`hour` = ledger.`hour`
  AND `usage_hours`.`key_id` = ledger.`key_id` AND `usage_hours`.`model` = ledger.`model`;
--> statement-breakpoint
UPDATE `usage_key_months` SET `prompt_tokens` = hours.`prompt`, `completion_tokens` = hours.`completion`
FROM (SELECT `organization_id`,
             CAST(strftime('%Y', `hour` * 3600, 'unixepoch') AS INTEGER) * 12 + CAST(strftime('%m', `hour` * 3600, 'unixepoch') AS INTEGER) - 1 AS `month`,
             `key_id`, `model`, sum(`prompt_tokens`) AS `prompt`, sum(`completion_tokens`) AS `completion`
      FROM `usage_hours` GROUP BY 1, 2, 3, 4) AS hours
WHERE `usage_key_months`.`organization_id` = hours.`organization_id` AND `usage_key_months`.`month` = hours.`month`
  AND `usage_key_months`.`key_id` = hours.`key_id` AND `usage_key_months`.`model` = hours.`model`;
