//! Webhook secrets at rest: each subscription's signing secrets (and, with asymmetric signing,
//! its Ed25519 private keys, contract section 16) are stored sealed with
//! AES-256-GCM under a data key, and the data key is stored only as KMS encrypted it (one
//! item of the webhooks table). A table dump, a backup or a point-in-time export alone
//! therefore cannot sign a delivery: that takes the deployment's KMS key too.
//!
//! The data key is decrypted once per process, on first use, and kept in memory: at most one
//! KMS call per cold start, none per request or delivery, and none at init (a function that
//! never touches a secret never calls KMS). The webhooks function creates the data key on
//! first use (`GenerateDataKey`); the delivery function only ever decrypts it.

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use aws_sdk_kms::primitives::Blob;
use aws_sdk_kms::types::DataKeySpec;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use tokio::sync::OnceCell;

use crate::aws::AwsClients;
use crate::clock::Timestamp;
use crate::config::{ConfigError, Settings, Table};
use crate::ids::{SubscriptionId, UserId};
use crate::random;
use crate::store::data_key::DataKeyStore;
use crate::store::StoreError;
use crate::webhooks::rotation::SigningSecrets;
use crate::webhooks::{SealedSecrets, SecretsAtRest, Subscription};

const NONCE_LEN: usize = 12;
/// Bound into every KMS call on the data key, so the key's policy can require it and a
/// ciphertext meant for something else does not decrypt as this data key.
const ENCRYPTION_CONTEXT: (&str, &str) = ("purpose", "webhook-secrets");

#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error("KMS: {0}")]
    Kms(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("no data key exists yet, so nothing can have been sealed with one")]
    NoDataKey,
    #[error("a sealed secret does not open (altered, moved to another item, or sealed under another data key)")]
    Unopenable,
}

/// Seals and opens subscriptions' secrets; one per function instance.
pub struct Sealer {
    /// KMS is asked for only when the data key is made or opened, once per instance.
    clients: AwsClients,
    /// The KMS key (id, ARN or alias) that protects the data key.
    kms_key_id: String,
    data_key: DataKeyStore,
    cipher: OnceCell<Aes256Gcm>,
}

impl Sealer {
    /// The sealer of the webhooks table and KMS key that `settings` name.
    pub fn new(clients: &AwsClients, settings: &Settings) -> Result<Self, ConfigError> {
        Ok(Self {
            clients: clients.clone(),
            kms_key_id: settings.require_secrets_kms_key()?.to_owned(),
            data_key: DataKeyStore::new(clients.dynamodb().clone(), settings.tables.require([Table::Webhooks])?[0]),
            cipher: OnceCell::new(),
        })
    }

    /// The secrets as stored for this subscription.
    pub async fn seal(
        &self,
        user_id: &UserId,
        subscription_id: &SubscriptionId,
        secrets: &SigningSecrets,
    ) -> Result<SealedSecrets, SealError> {
        let cipher = self.cipher(true).await?;
        let nonce = random::random_bytes::<NONCE_LEN>();
        let plaintext = serde_json::to_vec(secrets).expect("secrets serialize");
        let aad = associated_data(user_id, subscription_id);
        let sealed = cipher
            .encrypt(Nonce::from_slice(&nonce), Payload { msg: &plaintext, aad: &aad })
            .expect("AES-GCM seals any message of this size");
        Ok(SealedSecrets(STANDARD.encode([&nonce[..], &sealed].concat())))
    }

    /// The secrets of a stored subscription. A plain-text secret stored before secrets were
    /// sealed needs no key (`careerctl webhooks seal-secrets` seals those).
    pub async fn open(&self, subscription: &Subscription) -> Result<SigningSecrets, SealError> {
        let sealed = match &subscription.secrets {
            SecretsAtRest::Sealed(sealed) => sealed,
            SecretsAtRest::Plain(secret) => return Ok(SigningSecrets::new(secret.clone(), false)),
        };
        let cipher = self.cipher(false).await?;
        let bytes = STANDARD.decode(&sealed.0).map_err(|_| SealError::Unopenable)?;
        if bytes.len() < NONCE_LEN {
            return Err(SealError::Unopenable);
        }
        let (nonce, sealed) = bytes.split_at(NONCE_LEN);
        let aad = associated_data(&subscription.user_id, &subscription.id);
        let plaintext = cipher
            .decrypt(Nonce::from_slice(nonce), Payload { msg: sealed, aad: &aad })
            .map_err(|_| SealError::Unopenable)?;
        serde_json::from_slice(&plaintext).map_err(|_| SealError::Unopenable)
    }

    /// The data key's cipher, from memory after the first call. `create` makes the data key
    /// when none exists yet (only sealing needs that).
    async fn cipher(&self, create: bool) -> Result<&Aes256Gcm, SealError> {
        self.cipher
            .get_or_try_init(|| async {
                let key = match self.data_key.get().await? {
                    Some(encrypted) => self.decrypt_data_key(encrypted).await?,
                    None if create => self.create_data_key().await?,
                    None => return Err(SealError::NoDataKey),
                };
                Aes256Gcm::new_from_slice(&key).map_err(|_| SealError::Kms("the data key is not 32 bytes".into()))
            })
            .await
    }

    async fn decrypt_data_key(&self, encrypted: Vec<u8>) -> Result<Vec<u8>, SealError> {
        let output = self
            .clients
            .kms()
            .decrypt()
            .key_id(&self.kms_key_id)
            .ciphertext_blob(Blob::new(encrypted))
            .encryption_context(ENCRYPTION_CONTEXT.0, ENCRYPTION_CONTEXT.1)
            .send()
            .await
            .map_err(|e| SealError::Kms(aws_sdk_kms::error::DisplayErrorContext(e).to_string()))?;
        output.plaintext.map(Blob::into_inner).ok_or_else(|| SealError::Kms("Decrypt returned no plaintext".into()))
    }

    /// Generates the data key and stores it encrypted. Two instances may race on the very
    /// first use; the one whose item lost takes the stored key instead (its one extra KMS call).
    async fn create_data_key(&self) -> Result<Vec<u8>, SealError> {
        let output = self
            .clients
            .kms()
            .generate_data_key()
            .key_id(&self.kms_key_id)
            .key_spec(DataKeySpec::Aes256)
            .encryption_context(ENCRYPTION_CONTEXT.0, ENCRYPTION_CONTEXT.1)
            .send()
            .await
            .map_err(|e| SealError::Kms(aws_sdk_kms::error::DisplayErrorContext(e).to_string()))?;
        let (Some(plaintext), Some(encrypted)) = (output.plaintext, output.ciphertext_blob) else {
            return Err(SealError::Kms("GenerateDataKey returned no key".into()));
        };
        if self.data_key.insert(encrypted.as_ref(), Timestamp::now()).await? {
            return Ok(plaintext.into_inner());
        }
        let stored = self.data_key.get().await?.ok_or(SealError::NoDataKey)?;
        self.decrypt_data_key(stored).await
    }
}

/// Binds a sealed value to its item, so it does not open when copied into another one.
fn associated_data(user_id: &UserId, subscription_id: &SubscriptionId) -> Vec<u8> {
    [user_id.as_str().as_bytes(), &[0], subscription_id.as_str().as_bytes()].concat()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhooks::rotation::GracePeriod;
    use crate::webhooks::{Health, WebhookSecret};

    /// A sealer whose data key is already in memory: no KMS or table call is made.
    fn sealer() -> Sealer {
        let sdk = aws_types::SdkConfig::builder()
            .behavior_version(aws_sdk_kms::config::BehaviorVersion::latest())
            .region(aws_sdk_kms::config::Region::new("eu-west-1"))
            .build();
        let clients = AwsClients::new(sdk);
        let cipher = Aes256Gcm::new_from_slice(&random::random_bytes::<32>()).unwrap();
        Sealer {
            data_key: DataKeyStore::new(clients.dynamodb().clone(), "unused"),
            clients,
            kms_key_id: "alias/test".into(),
            cipher: OnceCell::new_with(Some(cipher)),
        }
    }

    fn stored(user_id: &str, subscription_id: &str, secrets: SecretsAtRest) -> Subscription {
        Subscription {
            user_id: user_id.parse().unwrap(),
            id: subscription_id.parse().unwrap(),
            target: crate::webhooks::Target::Url("https://hooks.example.com/".into()),
            events: vec![],
            secrets,
            public_keys: None,
            trace_context: false,
            created_at: "2026-11-27T08:00:00.000Z".parse().unwrap(),
            health: Health::Active,
            max_deliveries_per_second: None,
            while_disabled: crate::webhooks::WhileDisabled::Hold,
            identity_token: None,
            fast_since: None,
            slow_at: None,
            recovered_at: None,
            next_probe_at: None,
            probes: 0,
        }
    }

    #[tokio::test]
    async fn sealed_secrets_open_only_in_their_own_item() {
        let sealer = sealer();
        let secrets = SigningSecrets::new(WebhookSecret::generate(), true).rotated(
            WebhookSecret::generate(),
            Timestamp::now(),
            GracePeriod::DEFAULT,
        );
        let sealed_secrets = sealer
            .seal(&"u1".parse().unwrap(), &"whk_01JDQ40A1B2C3D4E5F6G7H8J9K".parse().unwrap(), &secrets)
            .await
            .unwrap();
        assert!(!sealed_secrets.0.contains("whsec_"));
        assert!(!sealed_secrets.0.contains(&STANDARD.encode(secrets.current.key())));
        let seed = serde_json::to_value(secrets.current_key.as_ref().unwrap()).unwrap();
        assert!(!sealed_secrets.0.contains(seed.as_str().unwrap()), "the private key is sealed too");
        let sealed = SecretsAtRest::Sealed(sealed_secrets.clone());
        assert_eq!(
            sealer.open(&stored("u1", "whk_01JDQ40A1B2C3D4E5F6G7H8J9K", sealed.clone())).await.unwrap(),
            secrets
        );

        for (user, subscription) in [("u2", "whk_01JDQ40A1B2C3D4E5F6G7H8J9K"), ("u1", "whk_01JDQ40A1B2C3D4E5F6G7H8J9M")]
        {
            let moved = sealer.open(&stored(user, subscription, sealed.clone())).await;
            assert!(matches!(moved, Err(SealError::Unopenable)), "{user}/{subscription}");
        }
        let mut bytes = STANDARD.decode(&sealed_secrets.0).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        let altered = SecretsAtRest::Sealed(SealedSecrets(STANDARD.encode(bytes)));
        assert!(matches!(
            sealer.open(&stored("u1", "whk_01JDQ40A1B2C3D4E5F6G7H8J9K", altered)).await,
            Err(SealError::Unopenable)
        ));
        let garbage = SecretsAtRest::Sealed(SealedSecrets("not base64!".into()));
        assert!(matches!(
            sealer.open(&stored("u1", "whk_01JDQ40A1B2C3D4E5F6G7H8J9K", garbage)).await,
            Err(SealError::Unopenable)
        ));
    }

    #[tokio::test]
    async fn each_seal_uses_a_fresh_nonce() {
        let sealer = sealer();
        let secrets = SigningSecrets::new(WebhookSecret::generate(), false);
        let (user, subscription) = ("u1".parse().unwrap(), "whk_01JDQ40A1B2C3D4E5F6G7H8J9K".parse().unwrap());
        let (a, b) = (
            sealer.seal(&user, &subscription, &secrets).await.unwrap(),
            sealer.seal(&user, &subscription, &secrets).await.unwrap(),
        );
        assert_ne!(a, b);
    }

    #[tokio::test]
    async fn a_plain_secret_stored_before_sealing_opens_without_a_key() {
        let secret = WebhookSecret::parse("whsec_Ab-_0123456789abcdefghijklmnopqrstuvwxyzABE").unwrap();
        let plain = stored("u1", "whk_01JDQ40A1B2C3D4E5F6G7H8J9K", SecretsAtRest::Plain(secret.clone()));
        let sealer = Sealer { cipher: OnceCell::new(), ..sealer() };
        assert_eq!(sealer.open(&plain).await.unwrap(), SigningSecrets::new(secret, false));
    }
}
