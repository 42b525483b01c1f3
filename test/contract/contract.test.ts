import { backends } from './backends.js';
import { storeContract } from './store.contract.js';

for (const backend of backends) storeContract(backend);
