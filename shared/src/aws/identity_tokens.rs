//! The identity tokens of HTTP subscriptions that asked for one (contract section 21): STS
//! `GetWebIdentityToken` called with the delivery function's own role, for the subscription's
//! audience, tagged with the subscription and its user. What is asked for is
//! `webhooks::identity_token`'s decision; a failed call is `aws_destination`'s to word.
//!
//! Each token is kept for this instance, per subscription and audience, until
//! `aws_destination::RENEW_BEFORE` before it expires: about one STS call per subscription per
//! 4 minutes while warm. Attempts of one subscription that find no token wait for the one
//! call the first of them makes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use aws_sdk_sts::types::Tag;

use crate::aws::aws_sender::aws_error;
use crate::aws::AwsClients;
use crate::delivery::aws_destination::{classify, still_fresh, AwsError, DestinationFailure, Step};
use crate::ids::SubscriptionId;
use crate::webhooks::identity_token::{tags, IdentityToken, SIGNING_ALGORITHM, TOKEN_SECONDS};
use crate::webhooks::Subscription;

/// The header an attempt carries the token in.
pub const AUTHORIZATION: &str = "Authorization";

#[derive(Clone)]
pub struct IdentityTokens {
    clients: AwsClients,
    tokens: Arc<Mutex<HashMap<TokenKey, Slot>>>,
}

/// A token is minted for one subscription and one audience: a PATCH of the audience mints
/// another.
#[derive(Clone, PartialEq, Eq, Hash)]
struct TokenKey {
    subscription: SubscriptionId,
    token: IdentityToken,
}

type Slot = Arc<tokio::sync::Mutex<Option<Minted>>>;

#[derive(Clone)]
struct Minted {
    bearer: String,
    expires: SystemTime,
}

impl IdentityTokens {
    /// Makes no client yet: STS's is made on the first token.
    pub fn new(clients: &AwsClients) -> Self {
        IdentityTokens { clients: clients.clone(), tokens: Arc::default() }
    }

    /// The `Authorization` header of an attempt to `subscription` (a fresh token, minted now
    /// if it has none), or none when it did not ask for a token.
    pub async fn authorization(
        &self,
        subscription: &Subscription,
    ) -> Result<Option<(&'static str, String)>, DestinationFailure> {
        let Some(token) = &subscription.identity_token else { return Ok(None) };
        let key = TokenKey { subscription: subscription.id.clone(), token: token.clone() };
        let slot = self.tokens.lock().expect("tokens").entry(key).or_default().clone();
        let mut kept = slot.lock().await;
        if let Some(fresh) = kept.as_ref().filter(|minted| still_fresh(minted.expires, SystemTime::now())) {
            return Ok(Some((AUTHORIZATION, fresh.bearer.clone())));
        }
        let minted = self.mint(subscription, token).await?;
        let header = (AUTHORIZATION, minted.bearer.clone());
        *kept = Some(minted);
        Ok(Some(header))
    }

    /// `sts:GetWebIdentityToken` for the subscription's audience, tagged with it and its user.
    async fn mint(&self, subscription: &Subscription, token: &IdentityToken) -> Result<Minted, DestinationFailure> {
        let request = self
            .clients
            .sts()
            .get_web_identity_token()
            .audience(token.audience())
            .signing_algorithm(SIGNING_ALGORITHM)
            .duration_seconds(TOKEN_SECONDS);
        let request =
            tags(&subscription.id, &subscription.user_id).into_iter().fold(request, |request, (key, value)| {
                request.tags(Tag::builder().key(key).value(value).build().expect("a tag has its key and value"))
            });
        let given = request.send().await.map_err(|err| classify(Step::GetWebIdentityToken, aws_error(&err)))?;
        let missing = || {
            classify(Step::GetWebIdentityToken, AwsError::Answered { code: Some("NoWebIdentityToken"), status: None })
        };
        let jwt = given.web_identity_token().ok_or_else(missing)?;
        let expires = given
            .expiration()
            .and_then(|expiration| SystemTime::try_from(*expiration).ok())
            .unwrap_or_else(|| SystemTime::now() + Duration::from_secs(TOKEN_SECONDS as u64));
        Ok(Minted { bearer: format!("Bearer {jwt}"), expires })
    }
}
