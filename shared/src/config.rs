//! Settings read once per cold start from the environment (the same variable names in
//! the SAM template, the local stack and the tests).

use std::env;
use std::time::Duration;

use crate::delivery::group_count::Groups;
use crate::store::PartitionQuota;
use crate::webhooks::destination::RoleArn;
use crate::webhooks::netguard::{Guard, Network, UrlPolicy};

/// A setting the environment does not give, or gives wrong: a function stops at cold start
/// with it, naming the variable.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("environment variable {name} is not set: {needed}")]
    Missing { name: &'static str, needed: &'static str },
    #[error("environment variable {name}: {problem}")]
    Invalid { name: &'static str, problem: String },
}

/// A setting that is a secret, such as the cursor signing key: its `Debug` never prints it,
/// so logging the settings cannot leak it.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretSetting(String);

impl SecretSetting {
    pub fn new(text: impl Into<String>) -> Self {
        SecretSetting(text.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for SecretSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretSetting(..)")
    }
}

impl ConfigError {
    /// `name` is set to a value that cannot be used.
    pub fn new(name: &'static str, problem: impl Into<String>) -> Self {
        Self::Invalid { name, problem: problem.into() }
    }

    /// The variable the error is about.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Missing { name, .. } | Self::Invalid { name, .. } => name,
        }
    }
}

/// Declares [`TableNames`] and [`Table`] from one list of `field: variant, environment
/// variable, name after the prefix`, so a table is added in one line.
macro_rules! table_names {
    ($($field:ident: $table:ident, $variable:literal, $name:literal;)+) => {
        /// The names of one stack's tables. A function's own come from its environment
        /// ([`Settings::from_env`]), where a table the template does not give it is unset:
        /// it reads them through [`TableNames::require`].
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub struct TableNames {
            $(pub $field: String,)+
        }

        /// A table of the service, as a function names the ones it needs.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Table {
            $($table,)+
        }

        impl Table {
            /// The environment variable that names the table.
            pub fn variable(self) -> &'static str {
                match self {
                    $(Self::$table => $variable,)+
                }
            }
        }

        impl TableNames {
            /// Every table: `(environment variable, name)`.
            pub fn all(&self) -> [(&'static str, &str); [$($variable),+].len()] {
                [$(($variable, &self.$field)),+]
            }

            pub fn with_prefix(prefix: &str) -> Self {
                Self { $($field: format!("{prefix}{}", $name),)+ }
            }

            fn name(&self, table: Table) -> &str {
                match table {
                    $(Table::$table => &self.$field,)+
                }
            }

            /// The names the variables give, each the local stack's (`<prefix>…`) where its
            /// variable is unset or blank when there is a `fallback`, and empty without one.
            fn from_lookup(vars: &Lookup, fallback: Option<&str>) -> Self {
                let defaults = fallback.map(Self::with_prefix);
                Self {
                    $($field: given(vars, $variable)
                        .or_else(|| defaults.as_ref().map(|defaults| defaults.$field.clone()))
                        .unwrap_or_default(),)+
                }
            }
        }
    };
}

table_names! {
    keys: Keys, "KEYS_TABLE", "api-keys";
    rate_limits: RateLimits, "RATE_LIMIT_TABLE", "rate-limits";
    alerts: Alerts, "ALERTS_TABLE", "alerts";
    preferences: Preferences, "PREFERENCES_TABLE", "preferences";
    webhooks: Webhooks, "WEBHOOKS_TABLE", "webhooks";
    deliveries: Deliveries, "DELIVERIES_TABLE", "deliveries";
    profiles: Profiles, "PROFILES_TABLE", "profiles";
    assessments: Assessments, "ASSESSMENTS_TABLE", "assessments";
}

/// The local stack's table names are `career-…`.
const LOCAL_PREFIX: &str = "career-";

impl TableNames {
    /// The names the environment gives, the local stack's where a variable is unset: for
    /// careerctl and the local stack. A function reads its own from [`Settings::from_env`],
    /// which has no fallback.
    pub fn from_env() -> Self {
        Self::from_lookup(&|name| env::var(name).ok(), Some(LOCAL_PREFIX))
    }

    /// The names of `tables`, in their order; an unset variable is an error naming it, so a
    /// function whose template does not give it a table it uses stops at cold start.
    pub fn require<const N: usize>(&self, tables: [Table; N]) -> Result<[&str; N], ConfigError> {
        let mut names = [""; N];
        for (name, table) in names.iter_mut().zip(tables) {
            *name = self.name(table);
            if name.is_empty() {
                return Err(ConfigError::Missing {
                    name: table.variable(),
                    needed: "the function's template gives it the name of every table it uses",
                });
            }
        }
        Ok(names)
    }
}

/// The variable's value, when it is set and not blank.
fn given(vars: &Lookup, name: &str) -> Option<String> {
    vars(name).filter(|value| !value.trim().is_empty())
}

/// Behaviour settings that the contract makes configurable.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    pub tables: TableNames,
    /// Requests per key per minute (`RATE_LIMIT_PER_MINUTE`, contract section 6).
    pub rate_limit_per_minute: u32,
    /// The span the rate limit counts over: one minute. Only tests and benchmarks shorten
    /// it, to see the limit at work without waiting minutes.
    pub rate_limit_window: Duration,
    /// What a subscription URL may be (contract section 5): `ALLOW_HTTP_WEBHOOK_URLS`
    /// (`false`: https only) and `WEBHOOK_ALLOWED_NETWORKS`, the comma-separated private
    /// networks the guard lets through (none). The local stack sets both for its loopback
    /// receivers ([`UrlPolicy::local_stack`]).
    pub webhook_urls: UrlPolicy,
    /// `CURSOR_SIGNING_KEY`: the HMAC key of every list's pagination cursors (the alerts
    /// and a subscription's delivery log).
    pub cursor_signing_key: Option<SecretSetting>,
    /// `DELIVERY_QUEUE_URL`: the main lane, where the fan-out sends one message per delivery
    /// to a subscription that is not failing.
    pub delivery_queue_url: Option<String>,
    /// `DELIVERY_RETRY_QUEUE_URL`: the retry lane, for retries and for every delivery to a
    /// subscription that is currently failing.
    pub retry_queue_url: Option<String>,
    /// `DEAD_LETTER_QUEUE_URL`: where a delivery goes when no attempt is left (or a `410`
    /// ended it).
    pub dead_letter_queue_url: Option<String>,
    /// `DELIVERY_SWEEP_AFTER_SECONDS`: how long past its due time a `pending` delivery is
    /// taken as lost on its way and put back on the retry lane (contract section 12).
    pub sweep_after: Duration,
    /// `DELIVERY_RETRY_BASE_SECONDS`: the first retry wait; later ones are multiples.
    pub retry_base: Duration,
    /// `DELIVERY_MAX_ATTEMPTS`: attempts before a delivery goes to the dead-letter queue.
    pub max_delivery_attempts: u32,
    /// `DELIVERY_GROUPS_PER_SUBSCRIPTION`: the most message groups of the main lane that one
    /// subscription's first attempts spread over while its receiver answers fast
    /// (`delivery::groups`, contract section 18).
    pub delivery_groups: Groups,
    /// `SECRETS_KMS_KEY_ID`: the KMS key (id, ARN or alias) that protects the data key of
    /// the webhook secrets.
    pub secrets_kms_key_id: Option<String>,
    /// `WEBHOOK_DISABLE_AFTER_SECONDS`: how long a subscription may fail without a success
    /// before its last-attempt failure disables it (contract section 9).
    pub webhook_disable_after: Duration,
    /// `WEBHOOK_PROBE_AFTER_SECONDS`: when a subscription disabled for failing is first probed,
    /// after it was disabled (contract section 20).
    pub probe_after: Duration,
    /// `WEBHOOK_PROBE_FOR_SECONDS`: how long after it was disabled it is probed.
    pub probe_for: Duration,
    /// `METRICS_NAMESPACE`: the CloudWatch namespace of the delivery metrics.
    pub metrics_namespace: String,
    /// `OPERATOR_TOPIC_ARN`: the SNS topic every operational event is also published to
    /// (contract section 15).
    pub operator_topic_arn: Option<String>,
    /// `SENDER_ROLE_ARN`: the delivery function's role, which the owner of an AWS destination
    /// trusts (contract section 17); its account and its partition (the template's
    /// `${AWS::Partition}`, that of the deployment's region) are the deployment's own. Unset, the
    /// deployment takes no AWS destination.
    pub sender_role_arn: Option<RoleArn>,
    /// What one partition key of a table takes a second: DynamoDB's. Not an environment
    /// variable: only the local stack's scale model (`local_aws::throttling`) makes it
    /// smaller, and the functions then share their items' load as they would on AWS.
    pub partition_quota: PartitionQuota,
    /// How many held deliveries one enable (or delete) settles itself (contract section 20);
    /// the sweep settles the rest, as many a run. Not an environment variable: only tests make
    /// it smaller, to see the rest settled without holding thousands.
    pub release_per_call: u32,
}

/// [`Settings::release_per_call`] as the contract says it (section 20).
pub const RELEASE_PER_CALL: u32 = 1_000;

impl Settings {
    /// Reads and checks every setting: a bad value is a [`ConfigError`] at cold start.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(&|name| env::var(name).ok())
    }

    /// Reads and checks every setting from `vars`, as [`Settings::from_env`] does from the
    /// process environment (the local stack gives each function the environment its template
    /// declares).
    pub fn from_vars(vars: &std::collections::HashMap<String, String>) -> Result<Self, ConfigError> {
        let vars = vars.clone();
        Self::from_lookup(&move |name| vars.get(name).cloned())
    }

    fn from_lookup(vars: &Lookup) -> Result<Self, ConfigError> {
        Ok(Self {
            tables: TableNames::from_lookup(vars, None),
            rate_limit_per_minute: at_least_one(vars, "RATE_LIMIT_PER_MINUTE", 600)?,
            rate_limit_window: Duration::from_secs(60),
            webhook_urls: UrlPolicy {
                allow_http: parse_var(vars, "ALLOW_HTTP_WEBHOOK_URLS", false)?,
                guard: Guard::allowing(networks(vars, "WEBHOOK_ALLOWED_NETWORKS")?),
            },
            cursor_signing_key: vars("CURSOR_SIGNING_KEY").map(SecretSetting),
            delivery_queue_url: vars("DELIVERY_QUEUE_URL"),
            retry_queue_url: vars("DELIVERY_RETRY_QUEUE_URL"),
            dead_letter_queue_url: vars("DEAD_LETTER_QUEUE_URL"),
            sweep_after: seconds(vars, "DELIVERY_SWEEP_AFTER_SECONDS", 300.0)?,
            retry_base: seconds(vars, "DELIVERY_RETRY_BASE_SECONDS", 30.0)?,
            max_delivery_attempts: at_least_one(vars, "DELIVERY_MAX_ATTEMPTS", 9)?,
            delivery_groups: delivery_groups(vars)?,
            secrets_kms_key_id: vars("SECRETS_KMS_KEY_ID").filter(|id| !id.trim().is_empty()),
            webhook_disable_after: seconds(vars, "WEBHOOK_DISABLE_AFTER_SECONDS", 432_000.0)?,
            probe_after: seconds(vars, "WEBHOOK_PROBE_AFTER_SECONDS", 600.0)?,
            probe_for: seconds(vars, "WEBHOOK_PROBE_FOR_SECONDS", 604_800.0)?,
            metrics_namespace: vars("METRICS_NAMESPACE").unwrap_or_else(|| "CareerService/Webhooks".into()),
            operator_topic_arn: vars("OPERATOR_TOPIC_ARN").filter(|arn| !arn.trim().is_empty()),
            sender_role_arn: sender_role_arn(vars)?,
            partition_quota: PartitionQuota::DYNAMODB,
            release_per_call: RELEASE_PER_CALL,
        })
    }

    /// The environment that [`Settings::from_env`] reads back as these settings (unset
    /// options are left out): what the local stack and the benchmarks give the functions
    /// they start, so that no list of variable names is kept anywhere else.
    pub fn to_env(&self) -> Vec<(&'static str, String)> {
        let seconds = |wait: Duration| wait.as_secs_f64().to_string();
        let tables = self.tables.all().into_iter().filter(|(_, table)| !table.is_empty());
        let mut vars: Vec<(&'static str, String)> = tables.map(|(name, table)| (name, table.to_owned())).collect();
        vars.extend([
            ("RATE_LIMIT_PER_MINUTE", self.rate_limit_per_minute.to_string()),
            ("ALLOW_HTTP_WEBHOOK_URLS", self.webhook_urls.allow_http.to_string()),
            (
                "WEBHOOK_ALLOWED_NETWORKS",
                self.webhook_urls.guard.allowed().iter().map(Network::to_string).collect::<Vec<_>>().join(","),
            ),
            ("DELIVERY_SWEEP_AFTER_SECONDS", seconds(self.sweep_after)),
            ("DELIVERY_RETRY_BASE_SECONDS", seconds(self.retry_base)),
            ("DELIVERY_MAX_ATTEMPTS", self.max_delivery_attempts.to_string()),
            ("DELIVERY_GROUPS_PER_SUBSCRIPTION", self.delivery_groups.get().to_string()),
            ("WEBHOOK_DISABLE_AFTER_SECONDS", seconds(self.webhook_disable_after)),
            ("WEBHOOK_PROBE_AFTER_SECONDS", seconds(self.probe_after)),
            ("WEBHOOK_PROBE_FOR_SECONDS", seconds(self.probe_for)),
            ("METRICS_NAMESPACE", self.metrics_namespace.clone()),
        ]);
        let optional = [
            ("CURSOR_SIGNING_KEY", self.cursor_signing_key.as_ref().map(|key| key.expose().to_owned())),
            ("DELIVERY_QUEUE_URL", self.delivery_queue_url.clone()),
            ("DELIVERY_RETRY_QUEUE_URL", self.retry_queue_url.clone()),
            ("DEAD_LETTER_QUEUE_URL", self.dead_letter_queue_url.clone()),
            ("SECRETS_KMS_KEY_ID", self.secrets_kms_key_id.clone()),
            ("OPERATOR_TOPIC_ARN", self.operator_topic_arn.clone()),
            ("SENDER_ROLE_ARN", self.sender_role_arn.as_ref().map(RoleArn::to_string)),
        ];
        vars.extend(optional.into_iter().filter_map(|(name, value)| Some((name, value?))));
        vars
    }

    pub fn require_cursor_key(&self) -> Result<&str, ConfigError> {
        match self.cursor_signing_key.as_ref().map(SecretSetting::expose) {
            Some(key) if key.len() >= 32 => Ok(key),
            _ => Err(ConfigError::new("CURSOR_SIGNING_KEY", "must be set to a secret of at least 32 characters")),
        }
    }

    pub fn require_secrets_kms_key(&self) -> Result<&str, ConfigError> {
        self.secrets_kms_key_id.as_deref().ok_or(ConfigError::Missing {
            name: "SECRETS_KMS_KEY_ID",
            needed: "the KMS key that protects the webhook secrets",
        })
    }

    pub fn require_queue_url(&self) -> Result<&str, ConfigError> {
        self.delivery_queue_url
            .as_deref()
            .ok_or(ConfigError::Missing { name: "DELIVERY_QUEUE_URL", needed: "the delivery queue's URL" })
    }

    pub fn require_dead_letter_queue_url(&self) -> Result<&str, ConfigError> {
        self.dead_letter_queue_url.as_deref().ok_or(ConfigError::Missing {
            name: "DEAD_LETTER_QUEUE_URL",
            needed: "the delivery dead-letter queue's URL",
        })
    }

    pub fn require_operator_topic_arn(&self) -> Result<&str, ConfigError> {
        self.operator_topic_arn
            .as_deref()
            .ok_or(ConfigError::Missing { name: "OPERATOR_TOPIC_ARN", needed: "the operator topic's ARN" })
    }

    pub fn require_retry_queue_url(&self) -> Result<&str, ConfigError> {
        self.retry_queue_url
            .as_deref()
            .ok_or(ConfigError::Missing { name: "DELIVERY_RETRY_QUEUE_URL", needed: "the retry queue's URL" })
    }
}

/// Where settings come from: the process environment, or a map in the tests.
type Lookup = dyn Fn(&str) -> Option<String>;

/// The variable's value, parsed; `default` when it is unset or blank.
fn parse_var<T: std::str::FromStr>(vars: &Lookup, name: &'static str, default: T) -> Result<T, ConfigError>
where
    T::Err: std::fmt::Display,
{
    match vars(name) {
        Some(text) if !text.trim().is_empty() => {
            text.trim().parse().map_err(|e: T::Err| ConfigError::new(name, format!("cannot parse {text:?}: {e}")))
        }
        _ => Ok(default),
    }
}

/// A count that must be positive (a limit or a number of attempts of 0 would stop the
/// service rather than configure it).
fn at_least_one(vars: &Lookup, name: &'static str, default: u32) -> Result<u32, ConfigError> {
    match parse_var(vars, name, default)? {
        0 => Err(ConfigError::new(name, "must be at least 1")),
        count => Ok(count),
    }
}

/// `DELIVERY_GROUPS_PER_SUBSCRIPTION`: 1 to [`Groups::MAX`], 16 by default.
fn delivery_groups(vars: &Lookup) -> Result<Groups, ConfigError> {
    const NAME: &str = "DELIVERY_GROUPS_PER_SUBSCRIPTION";
    let count: u8 = parse_var(vars, NAME, 16)?;
    Groups::new(count).ok_or_else(|| ConfigError::new(NAME, format!("must be 1 to {}", Groups::MAX)))
}

/// `SENDER_ROLE_ARN`: a role's ARN, or unset (or blank).
fn sender_role_arn(vars: &Lookup) -> Result<Option<RoleArn>, ConfigError> {
    const NAME: &str = "SENDER_ROLE_ARN";
    let text = vars(NAME).filter(|text| !text.trim().is_empty());
    text.map(|text| {
        RoleArn::parse(text.trim()).ok_or_else(|| ConfigError::new(NAME, format!("{text:?} is not a role ARN")))
    })
    .transpose()
}

/// A comma-separated list of networks; unset or blank, none.
fn networks(vars: &Lookup, name: &'static str) -> Result<Vec<Network>, ConfigError> {
    let text = vars(name).unwrap_or_default();
    let items = text.split(',').map(str::trim).filter(|item| !item.is_empty());
    items
        .map(|item| {
            item.parse().map_err(|e: crate::webhooks::netguard::InvalidNetwork| ConfigError::new(name, e.to_string()))
        })
        .collect()
}

/// A duration given in (possibly fractional) seconds: finite and not negative.
fn seconds(vars: &Lookup, name: &'static str, default: f64) -> Result<Duration, ConfigError> {
    let value: f64 = parse_var(vars, name, default)?;
    Duration::try_from_secs_f64(value)
        .map_err(|_| ConfigError::new(name, format!("must be a finite, non-negative number of seconds, not {value}")))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn settings_with(pairs: &[(&str, &str)]) -> Result<Settings, ConfigError> {
        let vars: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Settings::from_vars(&vars)
    }

    #[test]
    fn unset_or_blank_numbers_take_their_defaults() {
        let settings = settings_with(&[("DELIVERY_MAX_ATTEMPTS", " ")]).unwrap();
        assert_eq!(settings.rate_limit_per_minute, 600);
        assert_eq!(settings.retry_base, Duration::from_secs(30));
        assert_eq!(settings.max_delivery_attempts, 9);
        assert_eq!(settings.delivery_groups, Groups::new(16).unwrap());
        assert_eq!(settings.webhook_disable_after, Duration::from_secs(5 * 24 * 60 * 60));
        assert_eq!(settings.webhook_urls, UrlPolicy::default(), "https only, no allowed network");
    }

    #[test]
    fn a_table_the_environment_does_not_name_has_no_default_and_is_an_error_when_required() {
        let settings = settings_with(&[("DELIVERIES_TABLE", "stack-deliveries"), ("WEBHOOKS_TABLE", " ")]).unwrap();
        assert_eq!(settings.tables.require([Table::Deliveries]).unwrap(), ["stack-deliveries"]);
        let error = settings.tables.require([Table::Deliveries, Table::Webhooks]).unwrap_err();
        assert_eq!(error.name(), "WEBHOOKS_TABLE");
        assert!(error.to_string().starts_with("environment variable WEBHOOKS_TABLE is not set: "), "{error}");
        let named: Vec<&str> = settings
            .tables
            .all()
            .into_iter()
            .filter(|(_, table)| !table.is_empty())
            .map(|(variable, _)| variable)
            .collect();
        assert_eq!(named, ["DELIVERIES_TABLE"], "no table has a default name");
    }

    #[test]
    fn the_cursor_key_is_never_printed() {
        let settings = settings_with(&[("CURSOR_SIGNING_KEY", "a-cursor-key-of-at-least-32-characters")]).unwrap();
        assert_eq!(settings.require_cursor_key().unwrap(), "a-cursor-key-of-at-least-32-characters");
        assert!(!format!("{settings:?}").contains("a-cursor-key"), "{settings:?}");
    }

    #[test]
    fn good_numbers_are_read() {
        let settings = settings_with(&[
            ("RATE_LIMIT_PER_MINUTE", "5"),
            ("DELIVERY_RETRY_BASE_SECONDS", "0.25"),
            ("DELIVERY_MAX_ATTEMPTS", "1"),
            ("WEBHOOK_DISABLE_AFTER_SECONDS", "7"),
            ("WEBHOOK_PROBE_AFTER_SECONDS", "1.5"),
            ("WEBHOOK_PROBE_FOR_SECONDS", "60"),
            ("DELIVERIES_TABLE", "elsewhere"),
        ])
        .unwrap();
        assert_eq!(settings.webhook_disable_after, Duration::from_secs(7));
        assert_eq!((settings.probe_after, settings.probe_for), (Duration::from_millis(1500), Duration::from_secs(60)));
        assert_eq!(settings.tables.deliveries, "elsewhere");
        assert_eq!(settings.rate_limit_per_minute, 5);
        assert_eq!(settings.retry_base, Duration::from_millis(250));
        assert_eq!(settings.max_delivery_attempts, 1);
    }

    #[test]
    fn the_groups_per_subscription_are_one_to_the_most() {
        assert_eq!(settings_with(&[("DELIVERY_GROUPS_PER_SUBSCRIPTION", "1")]).unwrap().delivery_groups, Groups::ONE);
        for bad in ["0", "101", "-1", "many"] {
            let err = settings_with(&[("DELIVERY_GROUPS_PER_SUBSCRIPTION", bad)]).unwrap_err();
            assert_eq!(err.name(), "DELIVERY_GROUPS_PER_SUBSCRIPTION", "{bad}");
        }
    }

    #[test]
    fn the_environment_written_reads_back_as_the_same_settings_and_names_every_variable_read() {
        let settings = Settings {
            tables: TableNames::with_prefix("elsewhere-"),
            rate_limit_per_minute: 7,
            rate_limit_window: Duration::from_secs(60),
            webhook_urls: UrlPolicy::local_stack(),
            cursor_signing_key: Some(SecretSetting::new("a-cursor-key-of-at-least-32-characters")),
            delivery_queue_url: Some("http://127.0.0.1:5000/queue/main.fifo".into()),
            retry_queue_url: Some("http://127.0.0.1:5000/queue/retry".into()),
            dead_letter_queue_url: Some("http://127.0.0.1:5000/queue/dead.fifo".into()),
            sweep_after: Duration::from_millis(1500),
            retry_base: Duration::from_millis(250),
            max_delivery_attempts: 3,
            delivery_groups: Groups::new(5).unwrap(),
            secrets_kms_key_id: Some("alias/career".into()),
            webhook_disable_after: Duration::from_secs(7),
            probe_after: Duration::from_secs(11),
            probe_for: Duration::from_secs(13),
            metrics_namespace: "Elsewhere".into(),
            operator_topic_arn: Some("arn:aws:sns:us-east-1:123456789012:operations".into()),
            sender_role_arn: RoleArn::parse("arn:aws:iam::123456789012:role/career-deliver"),
            partition_quota: PartitionQuota::DYNAMODB,
            release_per_call: RELEASE_PER_CALL,
        };
        let written: HashMap<&str, String> = settings.to_env().into_iter().collect();
        let read = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let (asked, environment) = (read.clone(), written.clone());
        let again = Settings::from_lookup(&move |name| {
            asked.borrow_mut().push(name.to_owned());
            environment.get(name).cloned()
        });
        assert_eq!(again.unwrap(), settings);
        let mut read = read.take();
        read.sort();
        let mut names: Vec<&str> = written.into_keys().collect();
        names.sort();
        assert_eq!(read, names, "every variable read is written, and nothing else");
        let unset = Settings { cursor_signing_key: None, secrets_kms_key_id: None, ..settings };
        let names: Vec<&str> = unset.to_env().into_iter().map(|(name, _)| name).collect();
        assert!(!names.contains(&"CURSOR_SIGNING_KEY") && !names.contains(&"SECRETS_KMS_KEY_ID"), "unset: left out");
    }

    #[test]
    fn every_bad_number_is_a_config_error_naming_its_variable() {
        let cases = [
            ("DELIVERY_RETRY_BASE_SECONDS", &["-1", "nan", "NaN", "inf", "-inf", "1e300", "thirty"][..]),
            ("WEBHOOK_DISABLE_AFTER_SECONDS", &["-1", "nan", "inf", "five days"][..]),
            ("RATE_LIMIT_PER_MINUTE", &["0", "-5", "1.5", "many", "4294967296"][..]),
            ("DELIVERY_MAX_ATTEMPTS", &["0", "-1", "2.5", "nine", "4294967296"][..]),
            ("ALLOW_HTTP_WEBHOOK_URLS", &["yes", "1"][..]),
            ("WEBHOOK_ALLOWED_NETWORKS", &["loopback", "127.0.0.0/8,10.0.0.0/33", "127.0.0.1/8;::1"][..]),
        ];
        for (name, values) in cases {
            for value in values {
                let error = settings_with(&[(name, value)]).expect_err(&format!("{name}={value} is refused"));
                assert!(error.to_string().starts_with(&format!("environment variable {name}: ")), "{error}");
            }
        }
    }
}
