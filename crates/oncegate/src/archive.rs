//! Archives as the operator sees them: a period exported to an archive directory, an archive
//! re-checked, retention that removes rows only once their archive verified, and a proof read
//! back from an archive after retention removed it from the store.

use std::path::Path;
use std::sync::Arc;

use oncegate_core::ids::DeliveryId;
use oncegate_store::archive::{self, ArchiveError, ArchiveManifest, ArchiveVerified};
use oncegate_store::PurgeCounts;
use time::OffsetDateTime;

use crate::gate::{Gate, GateConfig};

/// One delivery read back from an archive: a gate over a scratch store that holds it, its
/// proof, links, queue items and effects, so every reader of a proof (explain, the API's
/// document) renders it as it rendered from the store. The scratch store goes with it.
pub struct ArchivedDelivery {
    gate: Gate,
    _scratch: tempfile::TempDir,
}

impl std::fmt::Debug for ArchivedDelivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArchivedDelivery")
            .field("scratch", &self._scratch.path())
            .finish_non_exhaustive()
    }
}

impl ArchivedDelivery {
    /// A gate over the scratch store that holds the archived delivery, to read it back with
    /// [`Gate::delivery_proof`].
    pub fn gate(&self) -> &Gate {
        &self.gate
    }

    /// Reads delivery `id` back from the archive at `dir`, after checking each of its files
    /// against the manifest's SHA-256; `None` when the archive does not hold it.
    ///
    /// ```
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// use oncegate::ArchivedDelivery;
    /// let dir = tempfile::tempdir().unwrap();
    /// let id = oncegate::core::ids::DeliveryId::from_u128(1);
    /// let missing = ArchivedDelivery::open(dir.path(), &id).await;
    /// // An empty directory is no archive: it has no manifest.
    /// assert!(missing.unwrap_err().to_string().contains("manifest.json"));
    /// # });
    /// ```
    pub async fn open(dir: &Path, id: &DeliveryId) -> Result<Option<Self>, ArchiveError> {
        let scratch = tempfile::tempdir().map_err(|e| ArchiveError::Io {
            path: std::env::temp_dir(),
            source: e,
        })?;
        let url = format!("sqlite://{}", scratch.path().join("archived.db").display());
        let store = oncegate_store::open(&url).await?;
        if !store.archive_restore(dir, id).await? {
            return Ok(None);
        }
        let contract = oncegate_core::contract::parse("(archive)", "")
            .map_err(|e| ArchiveError::Invalid(format!("{e}")))?;
        Ok(Some(ArchivedDelivery {
            gate: Gate::new(GateConfig::new(Arc::new(contract), store, Vec::new())),
            _scratch: scratch,
        }))
    }
}

impl Gate {
    /// Copies every delivery received before `before`, with its proof, links, queue items and
    /// the effects they name, into a new archive at `dir` (read from the read store when the
    /// gate has one). Nothing is removed from the store.
    pub async fn archive_export(
        &self,
        dir: &Path,
        before: OffsetDateTime,
    ) -> Result<ArchiveManifest, ArchiveError> {
        self.reader().archive_export(dir, before, self.now()).await
    }

    /// Applies the contract's retention as [`Gate::purge`] does, but first exports what the
    /// purge removes (every delivery past `proof_retention`) into a new archive at `dir` and
    /// verifies it: when the export or its verification fails, nothing is removed.
    pub async fn purge_archived(
        &self,
        dir: &Path,
    ) -> Result<(ArchiveVerified, PurgeCounts), ArchiveError> {
        let now = self.now();
        let policy = crate::purge::policy(self);
        let cut = now - policy.proof_retention;
        // From the store itself: a read store that lags would leave rows out of the archive
        // that the purge then removes.
        self.store().archive_export(dir, cut, now).await?;
        let verified = archive::verify(dir)?;
        let counts = self.store().purge(&policy, now, false).await?;
        tracing::info!(
            archive = %dir.display(),
            deliveries = counts.deliveries,
            proofs = counts.proofs,
            "retention purge applied after its archive verified"
        );
        Ok((verified, counts))
    }
}
