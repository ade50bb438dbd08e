#pragma once
// Fixture: a folder that is not a layer.
