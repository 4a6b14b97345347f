//! Released effects handed to a consumer's workers: an effect a person released (`distinct`)
//! or the lease sweep took over is claimed by one worker at a time, as a reservation with a
//! fencing token and a lease.

use oncegate_store::{Claim, StoreError, TenantFilter};

use crate::gate::Gate;

impl Gate {
    /// Hands one released effect of `tenants` (oldest first) to `worker` exclusively, under
    /// `lease`; `None` when there is no work. Its outcome is reported through
    /// [`Gate::held`] with the claim's fencing token.
    pub async fn claim(
        &self,
        worker: &str,
        tenants: &TenantFilter,
        lease: time::Duration,
    ) -> Result<Option<Claim>, StoreError> {
        self.store().claim(worker, tenants, lease, self.now()).await
    }
}
