#pragma once
// Fixture: a header at the root that is not an umbrella.
