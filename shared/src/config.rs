//! Settings read once per cold start from the environment (the same variable names in
//! the SAM template, the local stack and the tests).

use std::env;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
#[error("environment variable {name}: {problem}")]
pub struct ConfigError {
    name: &'static str,
    problem: String,
}

impl ConfigError {
    pub fn new(name: &'static str, problem: impl Into<String>) -> Self {
        Self { name, problem: problem.into() }
    }
}

/// The names of the service's tables; each defaults to the name the local stack uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableNames {
    pub keys: String,
    pub rate_limits: String,
    pub alerts: String,
    pub preferences: String,
    pub webhooks: String,
    pub profiles: String,
    pub assessments: String,
}

impl TableNames {
    /// Every table: `(environment variable, name)`.
    pub fn all(&self) -> [(&'static str, &str); 7] {
        [
            ("KEYS_TABLE", &self.keys),
            ("RATE_LIMIT_TABLE", &self.rate_limits),
            ("ALERTS_TABLE", &self.alerts),
            ("PREFERENCES_TABLE", &self.preferences),
            ("WEBHOOKS_TABLE", &self.webhooks),
            ("PROFILES_TABLE", &self.profiles),
            ("ASSESSMENTS_TABLE", &self.assessments),
        ]
    }

    pub fn with_prefix(prefix: &str) -> Self {
        Self {
            keys: format!("{prefix}api-keys"),
            rate_limits: format!("{prefix}rate-limits"),
            alerts: format!("{prefix}alerts"),
            preferences: format!("{prefix}preferences"),
            webhooks: format!("{prefix}webhooks"),
            profiles: format!("{prefix}profiles"),
            assessments: format!("{prefix}assessments"),
        }
    }

    pub fn from_env() -> Self {
        let defaults = Self::with_prefix("career-");
        let pick = |name: &str, default: &String| env::var(name).unwrap_or_else(|_| default.clone());
        Self {
            keys: pick("KEYS_TABLE", &defaults.keys),
            rate_limits: pick("RATE_LIMIT_TABLE", &defaults.rate_limits),
            alerts: pick("ALERTS_TABLE", &defaults.alerts),
            preferences: pick("PREFERENCES_TABLE", &defaults.preferences),
            webhooks: pick("WEBHOOKS_TABLE", &defaults.webhooks),
            profiles: pick("PROFILES_TABLE", &defaults.profiles),
            assessments: pick("ASSESSMENTS_TABLE", &defaults.assessments),
        }
    }
}

/// Behaviour settings that the contract makes configurable.
#[derive(Clone, Debug)]
pub struct Settings {
    pub tables: TableNames,
    /// Requests per key per minute (`RATE_LIMIT_PER_MINUTE`, contract section 6).
    pub rate_limit_per_minute: u32,
    /// The span the rate limit counts over: one minute. Only tests and benchmarks shorten
    /// it, to see the limit at work without waiting minutes.
    pub rate_limit_window: Duration,
    /// `ALLOW_INSECURE_WEBHOOK_URLS=true`: `http` and private targets, for the local stack
    /// and tests only.
    pub allow_insecure_webhook_urls: bool,
    /// `CURSOR_SIGNING_KEY`: the HMAC key of alert pagination cursors.
    pub cursor_signing_key: Option<String>,
    /// `DELIVERY_QUEUE_URL`: where the fan-out sends one message per delivery.
    pub delivery_queue_url: Option<String>,
    /// `DELIVERY_RETRY_BASE_SECONDS`: the first retry wait; later ones are multiples.
    pub retry_base: Duration,
    /// `DELIVERY_MAX_ATTEMPTS`: attempts before a delivery goes to the dead-letter queue.
    pub max_delivery_attempts: u32,
}

impl Settings {
    pub fn from_env() -> Result<Self, ConfigError> {
        Ok(Self {
            tables: TableNames::from_env(),
            rate_limit_per_minute: parse_var("RATE_LIMIT_PER_MINUTE", 600)?,
            rate_limit_window: Duration::from_secs(60),
            allow_insecure_webhook_urls: parse_var("ALLOW_INSECURE_WEBHOOK_URLS", false)?,
            cursor_signing_key: env::var("CURSOR_SIGNING_KEY").ok(),
            delivery_queue_url: env::var("DELIVERY_QUEUE_URL").ok(),
            retry_base: Duration::from_secs_f64(parse_var("DELIVERY_RETRY_BASE_SECONDS", 30.0)?),
            max_delivery_attempts: parse_var("DELIVERY_MAX_ATTEMPTS", 9)?,
        })
    }

    pub fn require_cursor_key(&self) -> Result<&str, ConfigError> {
        match self.cursor_signing_key.as_deref() {
            Some(key) if key.len() >= 32 => Ok(key),
            _ => Err(ConfigError {
                name: "CURSOR_SIGNING_KEY",
                problem: "must be set to a secret of at least 32 characters".into(),
            }),
        }
    }

    pub fn require_queue_url(&self) -> Result<&str, ConfigError> {
        self.delivery_queue_url.as_deref().ok_or(ConfigError {
            name: "DELIVERY_QUEUE_URL",
            problem: "must be set to the delivery queue's URL".into(),
        })
    }
}

fn parse_var<T: std::str::FromStr>(name: &'static str, default: T) -> Result<T, ConfigError>
where
    T::Err: std::fmt::Display,
{
    match env::var(name) {
        Ok(text) if !text.trim().is_empty() => text
            .trim()
            .parse()
            .map_err(|e: T::Err| ConfigError { name, problem: format!("cannot parse {text:?}: {e}") }),
        _ => Ok(default),
    }
}
