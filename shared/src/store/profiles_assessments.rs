//! The profiles and assessments tables, which belong to the rest of the platform. The
//! service only reads their streams; these writes are what the platform (and `careerctl`)
//! does to them.

use aws_sdk_dynamodb::types::ReturnValue;
use aws_sdk_dynamodb::Client;

use super::expression::{Expression, Updates};
use super::{s, time, StoreError};
use crate::clock::Timestamp;
use crate::ids::{AssessmentId, ProfileId, UserId};

#[derive(Clone)]
pub struct PlatformTables {
    client: Client,
    profiles: String,
    assessments: String,
}

impl PlatformTables {
    pub fn new(client: Client, profiles: impl Into<String>, assessments: impl Into<String>) -> Self {
        Self { client, profiles: profiles.into(), assessments: assessments.into() }
    }

    /// Changes the profile (a new revision and timestamp), creating it if needed. The write
    /// sets the `traceparent` attribute of the request that made it, as given (contract
    /// section 19: the fan-out reads it, and ignores a value that does not parse), or removes
    /// the one an earlier write left.
    pub async fn touch_profile(
        &self,
        user_id: &UserId,
        profile_id: &ProfileId,
        now: Timestamp,
        traceparent: Option<&str>,
    ) -> Result<(), StoreError> {
        let expression = Expression::new().set("updatedAt", time(now)).add("revision", 1);
        let expression = match traceparent {
            Some(traceparent) => expression.set("traceparent", s(traceparent)),
            None => expression.remove("traceparent"),
        };
        self.client
            .update_item()
            .table_name(&self.profiles)
            .key("userId", s(user_id))
            .key("profileId", s(profile_id))
            .expression(expression)
            .return_values(ReturnValue::None)
            .send()
            .await?;
        Ok(())
    }

    /// The id of one of the user's profiles, if there is one.
    pub async fn first_profile_id(&self, user_id: &UserId) -> Result<Option<ProfileId>, StoreError> {
        let output = self
            .client
            .query()
            .table_name(&self.profiles)
            .key_condition_expression("userId = :u")
            .expression_attribute_values(":u", s(user_id))
            .limit(1)
            .send()
            .await?;
        Ok(output
            .items
            .unwrap_or_default()
            .first()
            .and_then(|item| item.get("profileId"))
            .and_then(|value| value.as_s().ok())
            .and_then(|text| ProfileId::parse(text)))
    }

    /// Marks the assessment completed (creating it if needed).
    pub async fn complete_assessment(
        &self,
        user_id: &UserId,
        assessment_id: &AssessmentId,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        self.client
            .update_item()
            .table_name(&self.assessments)
            .key("userId", s(user_id))
            .key("assessmentId", s(assessment_id))
            .expression(Expression::new().set("status", s("completed")).set_if_absent("completedAt", time(now)))
            .send()
            .await?;
        Ok(())
    }
}
