package provider

import (
	"context"
	"fmt"
	"slices"

	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/egress-proxies/terraform-provider-egress/internal/provider/attribute_validator"
	"github.com/egress-proxies/terraform-provider-egress/internal/proxyconf"
)

// usersAttribute is auth's several users. A list, not a set: the framework refuses write-only attributes in
// set nested attributes (a set element is identified by its whole value, which a write-only value, null in
// plan and state, cannot take part in).
func usersAttribute() schema.ListNestedAttribute {
	return schema.ListNestedAttribute{
		Optional: true,
		MarkdownDescription: "Several users, each with a write-only password, instead of `username`. Their order does not matter to the proxy. " +
			"Adding, removing or renaming a user, or a new `password_wo_version`, changes the proxy in place where its backend can reconfigure it, " +
			"and replaces it otherwise. Requires a CLI that supports write-only attributes.",
		Validators: []validator.List{listvalidator.SizeBetween(1, proxyconf.MaxUsers), uniqueUsernames{}},
		NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
			"username": schema.StringAttribute{Required: true,
				MarkdownDescription: "User name, unique within the proxy: 1 to 64 letters, digits, `.`, `_` or `-`, starting with a letter or digit.",
				Validators:          []validator.String{attribute_validator.Username()}},
			"password_wo": schema.StringAttribute{Required: true, Sensitive: true, WriteOnly: true,
				MarkdownDescription: "Write-only password, 8 to 72 bytes: never stored in state or plan. Change `password_wo_version` to apply a new one.",
				Validators:          []validator.String{attribute_validator.Password()}},
			"password_wo_version": schema.Int64Attribute{Required: true,
				MarkdownDescription: "Any number; changing it applies the current `password_wo` of this user."},
		}},
	}
}

// userModel is one element of auth.users.
type userModel struct {
	Username          types.String `tfsdk:"username"`
	PasswordWO        types.String `tfsdk:"password_wo"`
	PasswordWOVersion types.Int64  `tfsdk:"password_wo_version"`
}

var userType = types.ObjectType{AttrTypes: map[string]attr.Type{
	"username":            types.StringType,
	"password_wo":         types.StringType,
	"password_wo_version": types.Int64Type,
}}

// usersOf are the elements of an auth.users value; none when it is null or unknown.
func usersOf(ctx context.Context, list types.List) ([]userModel, diag.Diagnostics) {
	if list.IsNull() || list.IsUnknown() {
		return nil, nil
	}
	var out []userModel
	diags := list.ElementsAs(ctx, &out, false)
	return out, diags
}

// readUserPasswords are the write-only passwords of auth.users by user name, from the configuration: plans
// and state never hold them.
func readUserPasswords(ctx context.Context, config tfsdk.Config) (map[string]string, diag.Diagnostics) {
	var list types.List
	diags := config.GetAttribute(ctx, path.Root("auth").AtName("users"), &list)
	users, d := usersOf(ctx, list)
	diags.Append(d...)
	out := map[string]string{}
	for _, u := range users {
		out[u.Username.ValueString()] = u.PasswordWO.ValueString()
	}
	return out, diags
}

// uniqueUsernames refuses two users of one name: the password file would keep only one of them.
type uniqueUsernames struct{}

var _ validator.List = uniqueUsernames{}

func (uniqueUsernames) Description(context.Context) string { return "every user has a name of its own" }
func (v uniqueUsernames) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (uniqueUsernames) ValidateList(ctx context.Context, req validator.ListRequest, resp *validator.ListResponse) {
	users, diags := usersOf(ctx, req.ConfigValue)
	resp.Diagnostics.Append(diags...)
	seen := map[string]int{}
	for i, u := range users {
		if u.Username.IsNull() || u.Username.IsUnknown() {
			continue
		}
		name := u.Username.ValueString()
		if first, twice := seen[name]; twice {
			p := req.Path.AtListIndex(i).AtName("username")
			resp.Diagnostics.AddAttributeError(p, "Duplicate username", fmt.Sprintf(
				"Attribute %s: %q already names %s; each user needs a name of its own.", p, name, req.Path.AtListIndex(first)))
			continue
		}
		seen[name] = i
	}
}

// users are the proxy's users: auth.users with their write-only passwords from the configuration, or the one
// user of username, with password or the write-only password_wo.
func (a authModel) users(ctx context.Context, writeOnly writeOnlyValues) ([]proxyconf.BasicAuth, diag.Diagnostics) {
	if a.Users.IsNull() || a.Users.IsUnknown() {
		password := a.Password.ValueString()
		if a.Password.IsNull() {
			password = writeOnly.password.ValueString()
		}
		return []proxyconf.BasicAuth{{Username: a.Username.ValueString(), Password: password}}, nil
	}
	list, diags := usersOf(ctx, a.Users)
	out := make([]proxyconf.BasicAuth, len(list))
	for i, u := range list {
		out[i] = proxyconf.BasicAuth{Username: u.Username.ValueString(), Password: writeOnly.userPasswords[u.Username.ValueString()]}
	}
	return out, diags
}

// importedAuth is auth as an import finds it: the backend never gives passwords back, nor the versions of
// write-only ones. One user takes the username form, as before auth took several, so that an import of a
// proxy made by the single-user form matches its configuration.
func importedAuth(users []proxyconf.BasicAuth) *authModel {
	a := &authModel{Username: types.StringNull(), Password: types.StringNull(), PasswordWO: types.StringNull(),
		PasswordWOVersion: types.Int64Null(), Users: types.ListNull(userType)}
	if len(users) == 1 {
		a.Username = types.StringValue(users[0].Username)
		return a
	}
	a.Users = userList(users, nil)
	return a
}

// setUsers records the user names the backend reports. The model keeps its form and versions while the
// backend holds the same names; otherwise the names the backend holds show, so the plan puts them right.
func (a *authModel) setUsers(users []proxyconf.BasicAuth) {
	if a.Users.IsNull() || a.Users.IsUnknown() {
		if len(users) == 1 {
			a.Username = types.StringValue(users[0].Username)
			return
		}
		// The backend holds several users where the configuration has one: show them, so the plan puts it right.
		a.Username = types.StringNull()
		a.Users = userList(users, nil)
		return
	}
	var names []string
	versions := map[string]types.Int64{}
	for _, e := range a.Users.Elements() {
		u, ok := e.(types.Object)
		if !ok {
			continue
		}
		name, _ := u.Attributes()["username"].(types.String)
		version, _ := u.Attributes()["password_wo_version"].(types.Int64)
		names = append(names, name.ValueString())
		versions[name.ValueString()] = version
	}
	if !slices.Equal(slices.Sorted(slices.Values(names)), slices.Sorted(slices.Values(proxyconf.Usernames(users)))) {
		a.Users = userList(users, versions)
	}
}

// userList is auth.users of these users, their versions from versions where it has them (null otherwise).
func userList(users []proxyconf.BasicAuth, versions map[string]types.Int64) types.List {
	elems := make([]attr.Value, len(users))
	for i, u := range users {
		version, ok := versions[u.Username]
		if !ok {
			version = types.Int64Null()
		}
		elems[i] = types.ObjectValueMust(userType.AttrTypes, map[string]attr.Value{
			"username": types.StringValue(u.Username), "password_wo": types.StringNull(), "password_wo_version": version,
		})
	}
	return types.ListValueMust(userType, elems)
}
